"""The Admin tab's releases section: freeze a dataset as a versioned benchmark
(annotation/release.py), written to `releases/` in the data folder and offered as a
zip, and the list of every release made."""
from __future__ import annotations

import html
import shutil

import gradio as gr

from capscope.annotation import browse, release
from capscope.annotation.refusals import AnnotationError
from capscope.db import Store
from capscope.ui.shared import admin_only, scratch_folder

RELEASE_HEADERS = ["dataset", "version", "items", "gold by", "made (UTC)", "by"]


def release_rows(store: Store) -> list[list]:
    rows = [[r["dataset"], r["version"], r["items"], r["method"], r["created_at"][:19], r["created_by"] or ""]
            for r in release.list_releases(store)]
    return rows or [[""] * len(RELEASE_HEADERS)]


def make_release_action(store: Store, dataset: str, version: str, licence: str, citation: str, guidelines: str):
    """(message, releases table, zip to download) for the Make release button."""
    if not dataset:
        return "**No release made:** choose a dataset.", release_rows(store), None
    version = (version or "").strip()
    try:
        metadata, out = release.make_server_release(store, dataset, version,
                                                    licence=(licence or "").strip() or None,
                                                    citation=(citation or "").strip() or None,
                                                    guidelines=(guidelines or "").strip() or None)
    except AnnotationError as err:
        return f"**No release made:** {html.escape(str(err))}", release_rows(store), None
    archive = shutil.make_archive(str(scratch_folder("release-") / out.name), "zip", out.parent, out.name)
    return (f"Release **{html.escape(version)}** of **{html.escape(dataset)}**: {metadata['items']} items, "
            f"{metadata['images']} images, gold by {html.escape(str(metadata['method']))}; kept in the data folder "
            f"as `releases/{html.escape(out.name)}`.", release_rows(store), archive)


def build_releases(store: Store, c: dict) -> None:
    gr.Markdown("### Releases\nA frozen version of a dataset's benchmark: the labels with their confidence, the "
                "images, a datasheet made from the data and the sha256 of every file. A version is never "
                "overwritten.", elem_id="cs-release-intro")
    with gr.Row():
        c["release_dataset"] = gr.Dropdown(label="Dataset", choices=[], allow_custom_value=True,
                                           elem_id="cs-release-dataset")
        c["release_version"] = gr.Textbox(label="Version", placeholder="1.0", max_length=64,
                                          elem_id="cs-release-version")
        c["release_licence"] = gr.Textbox(label="Licence", placeholder="CC BY 4.0", max_length=2000,
                                          elem_id="cs-release-licence")
        c["release_citation"] = gr.Textbox(label="Citation (default: a BibTeX entry)", max_length=5000,
                                           elem_id="cs-release-citation")
    c["release_guidelines"] = gr.Textbox(label="Annotation guidelines (copied into the datasheet)", lines=3,
                                         max_length=release.MAX_TEXT_CHARS, elem_id="cs-release-guidelines")
    c["release_make"] = gr.Button("Make release", elem_id="cs-release-make")
    c["release_message"] = gr.Markdown(elem_id="cs-release-message")
    c["release_table"] = gr.Dataframe(headers=RELEASE_HEADERS, interactive=False, elem_id="cs-release-table")
    c["release_file"] = gr.File(label="Release (zip)", interactive=False, height=90, elem_id="cs-release-file")

    def make(dataset, version, licence, citation, guidelines):
        return make_release_action(store, dataset, version, licence, citation, guidelines)

    c["release_make"].click(admin_only(store, make), [c["release_dataset"], c["release_version"],
                                                      c["release_licence"], c["release_citation"],
                                                      c["release_guidelines"]],
                            [c["release_message"], c["release_table"], c["release_file"]],
                            api_visibility="private", concurrency_id="db", concurrency_limit=4)
    c["release_load"] = [(admin_only(store, lambda: gr.update(choices=browse.dataset_names(store)), 1), None,
                          c["release_dataset"]),
                         (admin_only(store, lambda: release_rows(store), 1), None, c["release_table"])]
