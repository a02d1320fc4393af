"""Fine-tuning an InfoMetIC-family checkpoint on a team's own token and region
labels (`capscope train infometic --labels FILE | --dataset NAME --init ...`).

The labels are CapTokenEval items (docs/formats.md §3): a token labelled
"correct"/"incorrect" supervises the text side, a region labelled
"mentioned"/"unmentioned" the vision side; a null label is unknown and
supervises nothing. CLIP's text tower stays frozen, so every caption is
encoded once; with `train="visual"` the top `visual_blocks` blocks of the image
tower train (VisualTop: the frozen stem runs once per crop), else the head alone.

Losses on the labelled items:
- each labelled word's share of the text attention against the token rule's
  threshold (share_loss: what decides the verdict), every word weighing the same;
- the token verifier's per-piece logits, class-balanced BCE (capscope
  checkpoints), or eq. 9 of the paper for a checkpoint without a verifier;
- eq. 10 on the region attention (the mass on mentioned regions) and a
  BCE pushing labelled-unmentioned regions below the null slot;
- not forgetting: an L2 pull of every trained weight towards the parent's
  (L2-SP, Li et al. 2018), `anchor` times the squared distance; the parent's
  own world replayed (replay_items), where the child is also pulled towards
  the parent's own attention (parent_loss, `keep_parent`).
docs/fine-tuning.md says what was measured with other choices.

The run is `tuning` (finetune); its parts are `settings` (what is asked),
`labels` (which items, split how), `tensors` (the items as the head's inputs,
the image tower's trained top), `losses`, `loop` (train_head), `threshold`
(the child's fitted word threshold), `checkpoints` (parent in, child out),
`figures` (the figures and the printed table) and `defaults`. Their public
names are offered here, each loaded on first use: importing the package loads
no torch, so the CLI and the server read `defaults` at start for free.
"""
from __future__ import annotations

import importlib

# each public name's part: imported when the name is first asked for (the parts need torch)
PARTS = {
    "settings": ("TRAIN_PARTS", "Cancelled", "CheckSet", "FinetuneConfig", "FinetuneError"),
    "labels": ("Split", "WordKinds", "items_sha256", "label_counts", "labelled", "replay_items", "resolved_replay",
               "slot", "split_by_image", "swapped_items"),
    "tensors": ("SIDE_WORDS", "UNKNOWN", "Augment", "LabelledSet", "VisualTop", "clip_inputs", "encode_items",
                "mirror_boxes", "names_a_side", "preprocess_normalization"),
    "losses": ("anchor_loss", "parent_loss", "region_loss", "share_loss", "token_losses"),
    "loop": ("FROZEN", "keep_parent_outputs", "train_head", "trainable_parameters"),
    "checkpoints": ("load_parent", "parent_half"),
    "figures": ("FIGURE_KEYS", "check_figures", "figures_path", "format_report", "held_figures"),
    "tuning": ("finetune",),
}
HOMES = {name: part for part, names in PARTS.items() for name in names}
__all__ = sorted(HOMES)


def __getattr__(name: str):
    if name not in HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{HOMES[name]}"), name)
    globals()[name] = value  # asked once: later lookups (and monkeypatch) see a plain attribute
    return value
