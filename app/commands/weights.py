"""`capscope models`: list the model components, where they come from and
whether they are here; `capscope models download [NAME ...]` fetches them."""
from __future__ import annotations

import json
import sys

from capscope.common.errors import CapscopeError

# `capscope models download NAME`: the released checkpoints come from their authors' Google Drive folders
DOWNLOADS = ("infometic", "pacs", "clip", "clip4dm", "spacy")


def register(sub) -> None:
    models = sub.add_parser("models", help="list the model components, where they come from and whether they are here")
    models.add_argument("action", nargs="?", choices=["list", "download"], default="list")
    models.add_argument("names", nargs="*", metavar="NAME",
                        help=f"with download: {', '.join(DOWNLOADS)}; none: CLIP ViT-B-32 (openai), spaCy's "
                             "en_core_web_sm and the released InfoMetIC and PAC-S checkpoints, and a line on how "
                             "to get each other missing component")
    models.add_argument("--json", action="store_true")
    models.set_defaults(func=run_models)


def run_models(args) -> int:
    from capscope.metrics import inventory

    if args.names and args.action != "download":
        raise CapscopeError(f"models: names ({' '.join(args.names)}) go with download: capscope models download NAME")
    if args.action == "download":
        return download_named(args.names) if args.names else download_models()
    rows = inventory.components()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        mark = "present" if row["present"] else "MISSING"
        print(f"{row['component']:<11} {mark:<8} {row['loads']}\n{'':<20} from: {row['from']}\n{'':<20} get:  {row['get']}")
    return 0


def download_named(names: list[str]) -> int:
    """`capscope models download infometic pacs ...`: each named component; the
    first that cannot be had stops the command with its one line."""
    from capscope.metrics import downloads, loading

    unknown = [n for n in names if n not in DOWNLOADS]
    if unknown:
        raise CapscopeError(f"models download: unknown name {unknown[0]!r}; choose from {', '.join(DOWNLOADS)}")
    for name in dict.fromkeys(names):
        if name in downloads.RELEASES:
            downloads.download_release(name)
        elif name == "clip":
            loading.create_open_clip("ViT-B-32", "openai", loading.resolve_device("cpu"))
            print("CLIP ViT-B-32/openai: ready")
        elif name == "clip4dm":
            for model_name, tag in loading.CLIP4DM_BACKBONES:
                loading.create_open_clip(model_name, tag, loading.resolve_device("cpu"), component="CLIP4DM")
                print(f"CLIP4DM {model_name}/{tag}: ready")
        elif not _download_spacy():
            raise CapscopeError("models download: spaCy en_core_web_sm download failed (python -m spacy download en_core_web_sm)")
    return 0


def _download_spacy() -> bool:
    import subprocess

    from capscope.metrics import loading

    if loading.spacy_pipeline_present():
        print("spaCy en_core_web_sm: present")
        return True
    ok = subprocess.call([sys.executable, "-m", "spacy", "download", "en_core_web_sm"]) == 0
    print("spaCy en_core_web_sm:", "ready" if ok else "download failed")
    return ok


def download_models() -> int:
    """Fetch everything that has a public source: CLIP ViT-B-32, spaCy's
    pipeline, and the released InfoMetIC and PAC-S checkpoints; say how to get
    the rest. Every component is tried; the exit status says whether all came."""
    from capscope.metrics import downloads, inventory, loading

    failures = 0
    try:
        loading.create_open_clip("ViT-B-32", "openai", loading.resolve_device("cpu"))
        print("CLIP ViT-B-32/openai: ready")
    except loading.ModelUnavailable as err:
        failures += 1
        print(err)
    if not loading.spacy_pipeline_present():
        failures += not _download_spacy()
    for name in downloads.RELEASES:
        try:
            downloads.download_release(name)
        except loading.ModelUnavailable as err:
            failures += 1
            print(err)
    for row in inventory.components():
        if not row["present"] and row["component"] not in ("CLIP", "spaCy", "InfoMetIC", "PAC-S"):
            print(f"{row['component']}: {row['get']}")
    return 1 if failures else 0
