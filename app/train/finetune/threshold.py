"""The child's word threshold, fitted on its training items (FinetuneConfig's
fit_threshold): the scale of the token rule's threshold with the best
wrong-word F1 there (bench.evaluate.fit_word_scale), saved in the child."""
from __future__ import annotations

from pathlib import Path

from capscope.bench.evaluate import fit_word_scale
from capscope.train.finetune.checkpoints import checkpoint_scorer
from capscope.train.finetune.settings import FinetuneConfig


def fitted_threshold(config: FinetuneConfig, checkpoint: Path, items: list[dict]) -> dict:
    """{"scale": the best scale, "f1": the wrong-word F1 at each scale tried}."""
    scorer = checkpoint_scorer(config, checkpoint)
    return fit_word_scale(scorer, items, config.base_dir, token_rule=config.token_rule, beta=scorer.beta)


def threshold_lines(fit: dict | None, train: dict) -> list[str]:
    if fit is None:
        return []
    scale = f"{fit['scale']:g}"
    return [f"word threshold: the rule's times {scale}, fitted on the {train['items']} training items "
            f"(wrong-word F1 there {fit['f1']['1']:.3f} at 1, {fit['f1'][scale]:.3f} at {scale})"]
