"""Checkpoints of a `capscope train infometic` run: the head as capscope loads
it, the training state a resume continues from, and the probe that scores
each checkpoint on a held-out gold file through the public Scorer."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from capscope.common.jsonl import read_json_lines
from capscope.demo.clip_model import write_atomically
from capscope.metrics.infometic import capscope_checkpoint
from capscope.metrics.loading import read_checkpoint
from capscope.metrics.scorer import Scorer
from capscope.train.infometic_setup import InfoTrainConfig, Session, state_path
from capscope.train.schedule import TrainState


def save_checkpoint(s: Session, path: Path, half: bool) -> None:
    raw = capscope_checkpoint(s.model, s.clip_name, s.clip_config, crop=dict(s.crop),
                              training={"steps": s.state.step, "minutes": round(s.state.elapsed / 60, 2),
                                        "seed": s.config.seed})
    raw["state_dict"] = {k: (v.half() if half and v.is_floating_point() else v).detach().cpu().clone()
                         for k, v in raw["state_dict"].items()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomically(Path(path), lambda tmp: torch.save(raw, tmp))


def save_training(s: Session) -> None:
    save_checkpoint(s, s.config.out, s.config.half)
    payload = {"optimizer": s.optimizer.state_dict(), "state": asdict(s.state),
               "head": {k: v.detach().cpu() for k, v in s.model.state_dict().items() if not k.startswith("clip_backbone.")},
               "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(s.config).items()}}
    write_atomically(state_path(s.config.out), lambda tmp: torch.save(payload, tmp))


def load_training(model, optimizer, config: InfoTrainConfig) -> TrainState:
    payload = read_checkpoint(state_path(config.out), "InfoMetIC training state")
    model.load_state_dict(payload["head"], strict=False)
    optimizer.load_state_dict(payload["optimizer"])
    return TrainState(**payload["state"])


def checkpoint(s: Session, window: list[dict], bar) -> None:
    if window:
        s.state.loss_history.append((s.state.step, {k: float(np.mean([w[k] for w in window])) for k in window[0]}))
    save_training(s)
    figures = probe(s) if s.config.probe_gold else None
    if figures:
        s.state.probes.append((s.state.step, figures))
        save_training(s)
    loss_text = ", ".join(f"{k} {v:.3f}" for k, v in s.state.loss_history[-1][1].items()) if window else "n/a"
    bar.write(f"step {s.state.step} ({s.state.elapsed / 60:.1f} min): {loss_text}; saved {s.config.out}")
    if figures:
        bar.write("held-out: " + json.dumps(figures))


def probe(s: Session) -> dict:
    """The checkpoint just saved, scored on the probe gold file through the public Scorer."""
    was_training = s.model.training
    scorer = Scorer(["infometic"], device=str(s.device), regions="given",
                    infometic_checkpoint=str(s.config.out), token_rule="relative")
    items = read_json_lines(s.config.probe_gold)
    figures = s.evaluate_gold(scorer, "infometic", items, Path(s.config.probe_gold).parent, token_rule="relative",
                              beta=scorer.beta)
    s.model.train(was_training)
    keep = ("text_accuracy", "incorrect_token_f1", "incorrect_token_auroc", "vision_accuracy", "region_auroc")
    out = {k: _round(figures[k]) for k in keep}
    out["paper_rule"] = {k: _round(v) for k, v in figures["token_rules"]["paper"].items()}
    out["foil"] = _round(figures["foil"]["foil_accuracy"])
    out["trivial_text_accuracy"] = _round(figures["trivial"]["text_accuracy"])
    return out


def _round(v):
    return None if v is None else round(float(v), 4)
