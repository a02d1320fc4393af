"""The inventory of `capscope models`: every model component, what it loads,
from where, whether it is here and how to get it. Built by a call, not at
import, from the loaders (`loading`), the region proposers (`segmenters`) and the
click segmenters (`click_segmenters`)."""
from __future__ import annotations

from . import click_segmenters, segmenters
from .loading import CLIP4DM_BACKBONES, clip_tag_cached, demo_model_path, env_or_cache, spacy_pipeline_present


def components() -> list[dict]:
    """Every component `capscope models` lists: what it loads, from where,
    whether it is here and how to get it; the region proposers' rows come
    from their module (segmenters.component_rows)."""
    rows = [
        {
            "component": "CLIP", "loads": "open_clip ViT-B-32 / openai",
            "from": "open_clip's Hugging Face cache", "present": clip_tag_cached("ViT-B-32", "openai"),
            "get": "capscope models download, or --clip-pretrained FILE",
        },
        _file_component("PAC-S", "PAC-S ViT-B/32 checkpoint (state_dict, OpenAI key names)",
                        "CAPSCOPE_PACS_CHECKPOINT", "pacs/clip_ViT-B-32.pth",
                        "capscope models download pacs, or --pacs-checkpoint FILE"),
        _file_component("InfoMetIC", "released best_model.pth (430 keys)",
                        "CAPSCOPE_INFOMETIC_CHECKPOINT", "infometic/best_model.pth",
                        "capscope models download infometic, or --infometic-checkpoint FILE"),
        {
            "component": "spaCy", "loads": "en_core_web_sm (tags, parse)", "from": "site-packages",
            "present": spacy_pipeline_present(), "get": "capscope models download spacy (else blank English, a fallback)",
        },
        {
            "component": "demo model", "loads": "capscope's tiny CLIP + InfoMetIC for coloured shapes",
            "from": str(demo_model_path()), "present": demo_model_path().is_file(),
            "get": "capscope train demo (docs/train-infometic.md)",
        },
    ]
    rows += [
        {
            "component": f"CLIP4DM {name}", "loads": f"open_clip {name} / {tag} (a backbone of the CLIP4DM paper)",
            "from": "open_clip's Hugging Face cache", "present": clip_tag_cached(name, tag),
            "get": f"capscope models download clip4dm, then --metric clip4dm --clip-model {name} --clip-pretrained {tag}",
        }
        for name, tag in CLIP4DM_BACKBONES
    ]
    return rows + click_segmenters.component_rows() + segmenters.component_rows()


def _file_component(name: str, loads: str, variable: str, relative: str, get: str) -> dict:
    path = env_or_cache(variable, relative)
    return {"component": name, "loads": loads, "from": f"{path} (${variable})", "present": path.is_file(), "get": get}
