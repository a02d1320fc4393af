"""Annotation workflow over db/ and metrics/: import, queue, labels, agreement, export.

The REST API and the Gradio UI call the same functions (all take a
`capscope.db.Store` and, where a person acts, a `users.UserInfo`; all return
JSON-ready dicts):

- users: `authenticate(store, name, password)`, `add_user`, `set_active`, `list_users`, `get_user`,
  `credential_stamp`
- workflow (queue and labels): `next_item`, `previous_item`, `get_item`, `toggle_token`, `toggle_region`,
  `save_labels`, `undo`, `submit`, `skip`, `history`, `add_flag`, `image_path`
- queue: `set_queue_order(store, dataset, order, seed=0, model_version=None, *, token_rule)`,
  `refresh_queue(store, dataset, model_version=None, *, token_rule)`, `queue_view(store, dataset)`
- browse: `list_items(store, dataset=, status=, search=, sort=, descending=, page=, page_size=)`,
  `progress(store, user)`
- agreement: `agreement_report`, `gold_from_majority`, `adjudicate`, `gold_view`
- export: `iter_export(store, fmt, dataset)`, `export_to_file(store, fmt, file, dataset)`
- importer: `import_captions`, `import_captokeneval`, `import_predictions`

Errors for a caller's mistake are `refusals.AnnotationError` subclasses with an HTTP `status`.
"""
