"""The Scorer of a command (`score`, `features`, `correlate`, `diagnose`,
`evaluate`) and of each Ray worker, built from its `ScorerConfig`, with the
command line's errors."""
from __future__ import annotations

import logging

from capscope.common.errors import CapscopeError, ModelUnavailable
from capscope.metrics.config import ScorerConfig

log = logging.getLogger("capscope")


def build_scorer(config: ScorerConfig):
    """The Scorer `config` describes (it travels to Ray workers as it is), with
    a command line's errors: a missing weight says how to run on the demo model,
    a bad option is one line."""
    from capscope.metrics.scorer import Scorer

    try:
        scorer = Scorer(config=config)
    except ModelUnavailable as err:
        if config.demo is False:
            raise ModelUnavailable(f"{err}; or --demo to score with capscope's demo model as a whole") from None
        raise
    except ValueError as err:
        raise CapscopeError(str(err)) from None
    if scorer.demo:
        log.warning("DEMO MODEL: pretrained weights could not be had; scores come from capscope's "
                    "tiny coloured-shapes model and mean nothing on photos")
    return scorer
