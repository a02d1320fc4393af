"""`capscope import`, `export`, `users`, `agreement`, `gold` and `queue`: the
annotation store from the command line. The database is `--db URL`, else
`CAPSCOPE_DB_URL`, else an SQLite file in the data folder (`CAPSCOPE_DATA_DIR`)."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

from capscope.commands.accounts import register_users
from capscope.commands.options import add_db_option, command_line_user, open_store
from capscope.common.errors import CapscopeError
from capscope.metrics.config import add_flags


def register(sub) -> None:
    imp = sub.add_parser("import", help="import images + captions JSONL, a CapTokenEval file, or model predictions")
    source = imp.add_mutually_exclusive_group(required=True)
    source.add_argument("--captions", type=Path, help="captions JSONL: {id, image, caption, references?, regions?}, or a "
                        "COCO results JSON ([{image_id, caption}]) with --annotations")
    source.add_argument("--captokeneval", type=Path, help="a CapTokenEval file (labels become gold)")
    source.add_argument("--predictions", type=Path, help="a `capscope score` output file: pre-annotations")
    source.add_argument("--label-studio", type=Path, metavar="EXPORT.json",
                        help="Label Studio's JSON export of tasks capscope exported: each annotation becomes one "
                             "annotator's labels (--dataset: the items' dataset, default the one each task names)")
    imp.add_argument("--label-studio-url", default=None, metavar="URL",
                     help="with --label-studio: name annotators by their e-mail in the Label Studio at URL (its "
                          "export names them by id), read with the legacy API token in LABEL_STUDIO_API_KEY")
    imp.add_argument("--images", type=Path, help="images folder (required with --captions)")
    imp.add_argument("--annotations", type=Path, default=None,
                     help="with a COCO results --captions file: the COCO captions file (image files, references)")
    imp.add_argument("--model", default=None,
                     help="with a COCO results --captions file: the captioning model's name (default: the file's name)")
    imp.add_argument("--dataset", default=None, help="default: default (with --label-studio: each task's own)")
    imp.add_argument("--annotators-per-item", type=int, default=3, metavar="N")
    imp.add_argument("--regions", default="classic",
                     help="region proposer for images without regions, or given (only the file's regions; none "
                          "means the same) (default: classic)")
    imp.add_argument("--max-regions", type=int, default=20)
    imp.add_argument("--batch-size", type=int, default=16, help="rows per transaction")
    imp.add_argument("--no-progress", action="store_true")
    add_db_option(imp)
    imp.set_defaults(func=run_import)

    exp = sub.add_parser("export", help="export labels: CapTokenEval JSONL, CSV, COCO regions, or Label Studio tasks")
    exp.add_argument("--format", default="captokeneval",
                     choices=["captokeneval", "csv", "coco", "label-studio", "label-studio-config"],
                     help="label-studio: tasks with the model's suggestions as predictions; label-studio-config: "
                          "the labeling config they fit (to --out, else printed) (default captokeneval)")
    exp.add_argument("--out", default=None, help="output file, or - for standard output (required but for "
                                                  "label-studio-config)")
    exp.add_argument("--with-labels", action="store_true",
                     help="label-studio: the team's submitted labels as annotations too")
    exp.add_argument("--image-root", default="/",
                     help="label-studio: images are served from Label Studio's local files, relative to this "
                          "folder (its LOCAL_FILES_DOCUMENT_ROOT; default /)")
    exp.add_argument("--masks", action="store_true",
                     help="label-studio: a masked region is a brush stroke too, not only its box (larger files)")
    exp.add_argument("--image-url-prefix", default=None,
                     help="label-studio: images are at this URL prefix + their path relative to --image-root")
    exp.add_argument("--dataset", default=None)
    exp.add_argument("--with-images", action="store_true",
                     help="captokeneval only: copy the images into images/ beside --out and name them relatively, "
                          "so the benchmark can be shared")
    add_flags(exp, ["token_rule"])  # label-studio: the predictions' verdicts
    add_db_option(exp)
    exp.set_defaults(func=run_export)

    register_users(sub)

    agree = sub.add_parser("agreement", help="inter-annotator agreement (JSON)")
    agree.add_argument("--dataset", default=None)
    agree.add_argument("--all-tokens", action="store_true", help="count non-semantic tokens too")
    add_db_option(agree)
    agree.set_defaults(func=run_agreement)

    gold = sub.add_parser("gold", help="set gold labels by a consensus of the judgements")
    gold.add_argument("--dataset", default=None)
    gold.add_argument("--method", default="majority", choices=("majority", "dawid-skene", "model-aware"),
                      help="majority (each unit's majority), dawid-skene (each annotator's confusion learned from "
                           "all their labels) or model-aware (the active model as one more, weighted, voice)")
    gold.add_argument("--min-judgements", type=int, default=2)
    gold.add_argument("--replace-adjudicated", action="store_true")
    add_flags(gold, ["token_rule"])  # model-aware: the model's verdicts
    add_db_option(gold)
    gold.set_defaults(func=run_gold)

    controls = sub.add_parser("controls", help="control items, a dataset's control rate, and each annotator's "
                                               "quality (JSON)")
    controls.add_argument("--dataset", required=True, metavar="NAME")
    controls.add_argument("--mark", type=int, nargs="+", default=[], metavar="ITEM_ID",
                          help="make these items (with gold) controls")
    controls.add_argument("--unmark", type=int, nargs="+", default=[], metavar="ITEM_ID")
    controls.add_argument("--rate", type=float, default=None,
                          help="the share of handed-out items that are controls, 0 to 0.5 (default 0.1)")
    controls.add_argument("--show-answers", choices=("yes", "no"), default=None,
                          help="show an annotator a control's gold once they submit it")
    controls.add_argument("--flag-below", type=float, default=None, metavar="ACCURACY",
                          help="flag annotators whose control accuracy is below this (0 to 1)")
    add_db_option(controls)
    controls.set_defaults(func=run_controls)

    release = sub.add_parser("release", help="freeze a dataset as a versioned benchmark folder (JSONL, parquet, "
                                             "images, datasheet, metadata)")
    release.add_argument("--dataset", default=None, metavar="NAME")
    release.add_argument("--version", default=None, metavar="V", help="e.g. 1.0; a version that exists is refused")
    release.add_argument("--out", type=Path, default=None, metavar="DIR", help="a folder that does not exist yet")
    release.add_argument("--licence", default=None, metavar="TEXT", help="the licence, as the datasheet gives it")
    release.add_argument("--citation", default=None, metavar="TEXT", help="how to cite it (default: a BibTeX entry)")
    release.add_argument("--guidelines", type=Path, default=None, metavar="FILE",
                         help="the annotation guidelines (a text or Markdown file), copied into the datasheet")
    release.add_argument("--remake", action="store_true", help="write a recorded release again, byte for byte")
    release.add_argument("--list", action="store_true", help="list the recorded releases")
    add_db_option(release)
    release.set_defaults(func=run_release)

    queue = sub.add_parser("queue", help="show or set the order a dataset's annotation queue hands items out in")
    queue.add_argument("--dataset", required=True, metavar="NAME")
    queue.add_argument("--order", default=None,
                       help="set it: sequential (caption id), random (by --seed), uncertainty (closest to the model's "
                            "threshold first), disagreement (split judgements first), consensus (the least "
                            "confident gold first)")
    queue.add_argument("--seed", type=int, default=0, metavar="N", help="the random order's seed (default 0)")
    queue.add_argument("--model-version", default=None, metavar="V",
                       help="uncertainty: rank by this model version's predictions (default: each item's newest)")
    queue.add_argument("--refresh", action="store_true",
                       help="rank again under the current order (after new predictions or captions)")
    queue.add_argument("--relabel-below", type=float, default=None, metavar="CONFIDENCE",
                       help="give one more annotator to every item whose least confident gold label is under this "
                            "(with --order consensus: those come first)")
    queue.add_argument("--show", type=int, default=10, metavar="N", help="how many queued item ids to print")
    add_flags(queue, ["token_rule"])  # uncertainty: the verdicts it measures
    add_db_option(queue)
    queue.set_defaults(func=run_queue)


def import_label_studio(store, args) -> int:
    from capscope.annotation import label_studio

    emails = None
    if args.label_studio_url:
        token = os.environ.get("LABEL_STUDIO_API_KEY")
        if not token:
            raise CapscopeError("--label-studio-url needs Label Studio's legacy API token in LABEL_STUDIO_API_KEY")
        emails = label_studio.user_emails(args.label_studio_url, token)
    report = label_studio.import_export(store, args.label_studio, args.dataset, emails)
    for line in report.not_mapped:
        print(f"not mapped: {line}", file=sys.stderr)
    print(report.summary())
    return 0


def export_label_studio(args) -> int:
    from capscope.annotation import label_studio

    if args.format == "label-studio-config":
        with written(args.out or "-") as out:
            out.write(label_studio.labeling_config())
        return 0
    if args.out is None:
        raise CapscopeError("--format label-studio needs --out FILE.json")
    store = open_store(args)
    tasks = label_studio.tasks(store, args.dataset, token_rule=args.token_rule, with_labels=args.with_labels,
                               image_root=args.image_root, url_prefix=args.image_url_prefix, masks=args.masks)
    with written(args.out, lambda: f"{count} tasks") as out:
        count = _write_json_array(tasks, out)
    return 0


@contextlib.contextmanager
def written(out: str, what=lambda: ""):
    """The file every export format writes to: standard output for "-", else
    OUT.partial renamed to OUT once whole (a reader never sees half a file);
    says what it wrote (`what()`, read at the end) on standard error."""
    if out == "-":
        yield sys.stdout
        return
    path = Path(out)
    partial = path.with_name(path.name + ".partial")
    try:
        with partial.open("w", encoding="utf-8", newline="") as handle:
            yield handle
        partial.replace(path)
    except OSError as err:
        raise CapscopeError(f"cannot write {out}: {err.strerror}") from None
    finally:
        partial.unlink(missing_ok=True)
    said = what()
    print(f"wrote {out}" + (f": {said}" if said else ""), file=sys.stderr)


def _write_json_array(rows, out) -> int:
    """A JSON array written row by row (an export of any size in flat memory)."""
    count = 0
    out.write("[")
    for row in rows:
        out.write(("," if count else "") + "\n" + json.dumps(row))
        count += 1
    out.write("\n]\n")
    return count


def run_import(args) -> int:
    from capscope.annotation import importer

    store = open_store(args)
    if args.label_studio:
        return import_label_studio(store, args)
    dataset = args.dataset or "default"
    regions = "none" if args.regions == "given" else args.regions  # `score --regions given` says the same
    options = importer.ImportOptions(dataset=dataset, annotators_per_item=args.annotators_per_item,
                                     regions=regions, max_regions=args.max_regions,
                                     batch_size=max(1, args.batch_size), progress=not args.no_progress)
    if args.captions:
        if args.images is None:
            raise CapscopeError("--captions needs --images DIR")
        with captions_file(args) as captions:
            report = importer.import_captions(store, captions, args.images, options)
    elif args.captokeneval:
        report = importer.import_captokeneval(store, args.captokeneval, options, args.images)
    else:
        report = importer.import_predictions(store, args.predictions, dataset)
    for error in report.errors:
        print(f"rejected {error}", file=sys.stderr)
    print(report.summary())
    return 1 if report.errors else 0


@contextlib.contextmanager
def captions_file(args):
    """--captions as a captions JSONL: itself, or a COCO results file written as one
    (ids are image ids, images the annotations' file names, `model` named)."""
    from capscope.batch import inputs

    if inputs.input_layout(args.captions, otherwise="pairs") != "coco-results":  # the importer reads the rest
        yield args.captions
        return
    if args.annotations is None:
        raise CapscopeError(f"{args.captions} is a COCO results file: name its captions annotations file (--annotations)")
    model = args.model or args.captions.stem
    rows = ({**pair, "model": model} for pair in
            inputs.coco_pairs(args.captions, inputs.CocoCaptions(args.annotations), args.images, absolute=False))
    with tempfile.TemporaryDirectory(prefix="capscope-import-") as folder:
        path = Path(folder) / f"{args.captions.stem}.jsonl"
        inputs.write_pairs(({k: v for k, v in row.items() if k != "image_id"} for row in rows), path)
        yield path


def run_export(args) -> int:
    from capscope.annotation.export import export_to_file

    if args.format.startswith("label-studio"):
        return export_label_studio(args)
    if args.out is None:
        raise CapscopeError(f"--format {args.format} needs --out FILE (or - for standard output)")

    if args.with_images and (args.format != "captokeneval" or args.out == "-"):
        raise CapscopeError("--with-images needs --format captokeneval and an --out file")
    store = open_store(args)
    if args.with_images:
        from capscope.annotation.export import export_benchmark

        try:
            items, images = export_benchmark(store, Path(args.out), args.dataset)
        except OSError as err:
            raise CapscopeError(f"cannot write {args.out}: {err.strerror}") from None
        print(f"wrote {args.out}: {items} items, {images} images in {Path(args.out).parent / 'images'}",
              file=sys.stderr)
        return 0
    with written(args.out) as out:
        export_to_file(store, args.format, out, args.dataset)
    return 0


def run_agreement(args) -> int:
    from capscope.annotation.agreement import agreement_report

    report = agreement_report(open_store(args), args.dataset, semantic_only=not args.all_tokens)
    print(json.dumps(report, indent=2))
    return 0


def run_gold(args) -> int:
    from capscope.annotation.agreement import gold_by_consensus

    done = gold_by_consensus(open_store(args), args.dataset, args.method, token_rule=args.token_rule,
                             min_judgements=args.min_judgements, replace_adjudicated=args.replace_adjudicated)
    print(f"gold labels written for {done['written']} items (method {done['method']})")
    return 0


def run_release(args) -> int:
    from capscope.annotation import release

    store = open_store(args)
    if args.list:
        for found in release.list_releases(store, args.dataset):
            print(f"{found['dataset']} {found['version']}: {found['items']} items, gold by {found['method']}, "
                  f"made {found['created_at']} by {found['created_by'] or 'unknown'}")
        return 0
    missing = [flag for flag, value in (("--dataset", args.dataset), ("--version", args.version), ("--out", args.out))
               if value is None]
    if missing:
        raise CapscopeError(f"capscope release needs {', '.join(missing)} (or --list)")
    if args.remake:
        metadata = release.remake_release(store, args.dataset, args.version, args.out)
    else:
        guidelines = None
        if args.guidelines is not None:
            if not args.guidelines.is_file():
                raise CapscopeError(f"--guidelines: no file at {args.guidelines}")
            guidelines = args.guidelines.read_text(encoding="utf-8", errors="replace")
        metadata = release.make_release(store, args.dataset, args.version, args.out, licence=args.licence,
                                        citation=args.citation, guidelines=guidelines, actor=command_line_user())
    print(f"release {metadata['version']} of {metadata['name']}: {metadata['items']} items, "
          f"{metadata['images']} images, {len(metadata['files'])} files in {args.out}")
    return 0


def run_controls(args) -> int:
    from capscope.annotation import controls

    store = open_store(args)
    for item_id in args.mark:
        controls.set_control(store, item_id, True)
    for item_id in args.unmark:
        controls.set_control(store, item_id, False)
    given = {key: value for key, value in (("rate", args.rate), ("min_accuracy", args.flag_below)) if value is not None}
    if args.show_answers is not None:
        given["show_answers"] = args.show_answers == "yes"
    settings = controls.set_control_settings(store, args.dataset, **given)
    print(json.dumps({**settings, "annotators": controls.annotator_quality(store, args.dataset)}, indent=2))
    return 0


def run_queue(args) -> int:
    from capscope.annotation import queue

    store = open_store(args)
    if args.relabel_below is not None:
        opened = queue.open_relabel_slots(store, args.dataset, args.relabel_below)
        print(f"{opened} items get one more annotator (gold confidence under {args.relabel_below})")
    if args.order is not None:
        queue.set_queue_order(store, args.dataset, args.order, args.seed, args.model_version,
                              token_rule=args.token_rule)
    elif args.refresh:
        queue.refresh_queue(store, args.dataset, args.model_version, token_rule=args.token_rule)
    view = queue.queue_view(store, args.dataset, limit=max(0, args.show))
    print(f"dataset {view['dataset']}: order {view['order']}, seed {view['seed']}, {view['ranked']} items ranked")
    print("next: " + (" ".join(str(i) for i in view["next"]) or "(nothing left)"))
    return 0


