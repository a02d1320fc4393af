"""The flags that several commands share (the model, regions, precision,
engine and database options) and `open_store`."""
from __future__ import annotations

import argparse

from capscope.metrics.constants import CLIP4DM_EPSILON, CLIP4DM_LAYERS, DEFAULT_TOKEN_RULE, PRECISIONS, TOKEN_RULES
from capscope.common.errors import CapscopeError
from capscope.metrics.regions import PROPOSERS
from capscope.metrics.registry import METRIC_NAMES

METRICS = METRIC_NAMES  # live: a metric registered later is a valid choice


REGION_SOURCES = (*PROPOSERS, "given")


ENGINES = ("local", "ray")


def add_model_options(parser: argparse.ArgumentParser, long_captions: str = "windows") -> None:
    """Options shared by every command that builds a Scorer; `long_captions`
    is the command's default reading of long captions."""
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--clip-model", default=None, help="open_clip model name (default ViT-B-32)")
    parser.add_argument("--clip-pretrained", default=None, help="open_clip pretrained tag or a local checkpoint file (default openai)")
    parser.add_argument("--infometic-checkpoint", default=None, help="released best_model.pth or a capscope-trained checkpoint")
    parser.add_argument("--pacs-checkpoint", default=None, help="PAC-S checkpoint file (state_dict with OpenAI CLIP keys)")
    parser.add_argument("--alpha-clip-checkpoint", default=None,
                        help="Alpha-CLIP visual checkpoint for HICE-S region features (else masked crops)")
    parser.add_argument("--beta", type=float, default=0.1, help="threshold for correct tokens / mentioned regions (paper: 0.1)")
    add_token_rule_option(parser)
    add_long_captions_option(parser, long_captions)
    add_clip4dm_options(parser)
    add_precision_option(parser)
    add_demo_option(parser)


SCORING_ONLY = ("pacs_checkpoint", "alpha_clip_checkpoint", "beta", "token_rule", "long_captions", "clip4dm_epsilon",
                "clip4dm_layers")


class ScoringOptionsHidden:
    """`parser` for the add_*_option helpers, with the options that only judge
    captions left out of `--help` (`features` judges none); they stay
    accepted, as scripts written before may pass them."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser

    def add_argument(self, *flags: str, **kwargs):
        dest = kwargs.get("dest") or flags[0].lstrip("-").replace("-", "_")
        if dest in SCORING_ONLY:
            kwargs["help"] = argparse.SUPPRESS
        return self.parser.add_argument(*flags, **kwargs)


def add_demo_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--demo", action="store_true",
                        help="score with capscope's demo model as a whole (coloured shapes, not photos); without it a "
                             "weight that cannot be had stops the run before scoring, never a run that mixes the two")


def add_token_rule_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--token-rule", default=DEFAULT_TOKEN_RULE, choices=TOKEN_RULES,
                        help="how infometic and infoclip judge words and regions: relative: share > "
                             "min(beta, beta*5/n) for n semantic words (n regions), which holds at every caption "
                             "length and region count; paper: share > beta, which flags every word of a caption "
                             "with more than ten semantic words and leaves out every region among fifteen")


def add_long_captions_option(parser: argparse.ArgumentParser, default: str = "windows") -> None:
    from capscope.metrics.windows import LONG_CAPTIONS

    parser.add_argument("--long-captions", default=default, choices=LONG_CAPTIONS,
                        help="captions longer than a model reads (InfoMetIC: 30 BPE pieces, CLIP: 77 tokens): "
                             "windows: word-level metrics read every window, CLIP-S and PAC-S the first 77 tokens "
                             "(their papers' way); cut: every metric reads what fits, as the released codes; "
                             "all-windows: CLIP-S and PAC-S too, the mean over windows")


def add_precision_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--precision", default="fp32", choices=list(PRECISIONS),
                        help="the CLIP towers in fp32, or under bf16 (CPU or CUDA) or fp16 (CUDA) autocast; "
                             "`capscope bench` shows the speed and the change in scores of each")


def add_clip4dm_options(parser: argparse.ArgumentParser) -> None:
    """CLIP4DM's two settings, named as in its released main.py (--epsilon, --start_layer_text)."""
    parser.add_argument("--clip4dm-epsilon", type=float, default=CLIP4DM_EPSILON,
                        help="clip4dm: a word whose attribution is below this is wrong (released default -5e-5)")
    parser.add_argument("--clip4dm-layers", type=int, default=CLIP4DM_LAYERS,
                        help="clip4dm: relevance from the last N text blocks (released default 3)")


def add_region_options(parser: argparse.ArgumentParser) -> None:
    """Where regions come from, for every command that scores or encodes images."""
    parser.add_argument("--regions", default="classic", choices=REGION_SOURCES)
    parser.add_argument("--max-regions", type=int, default=20)


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """Where the scoring runs: here, or on the workers of a Ray cluster."""
    parser.add_argument("--engine", default="local", choices=ENGINES,
                        help="local: this process; ray: the actors of a Ray cluster, one Scorer each "
                             '(pip install -e ".[ray]")')
    parser.add_argument("--address", default=None,
                        help="with --engine ray: the cluster (auto, HOST:PORT, ray://HOST:PORT); default: RAY_ADDRESS, "
                             "else the cluster started on this machine, else a new local one")
    parser.add_argument("--workers", type=int, default=None,
                        help="with --engine ray: how many workers (default: one per GPU, else half the CPUs)")
    parser.add_argument("--gpus-per-worker", type=float, default=None,
                        help="with --engine ray: GPUs each worker holds (default 1 where the cluster has GPUs)")


def engine_cluster(args):
    """None for a local run, else where and how wide the Ray run is; bad combinations in one line."""
    ray_only = {"--address": args.address, "--workers": args.workers, "--gpus-per-worker": args.gpus_per_worker}
    if args.engine == "local":
        given = [flag for flag, value in ray_only.items() if value is not None]
        if given:
            raise CapscopeError(f"{given[0]} goes with --engine ray")
        return None
    if args.workers is not None and args.workers < 1:
        raise CapscopeError("--workers must be at least 1")
    if args.gpus_per_worker is not None and args.gpus_per_worker < 0:
        raise CapscopeError("--gpus-per-worker must be 0 or more")
    from capscope.batch.engine_ray import Cluster

    return Cluster(args.address, args.workers, args.gpus_per_worker, args.device)


def add_db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, metavar="URL",
                        help="SQLAlchemy database URL (default: $CAPSCOPE_DB_URL or an SQLite file in the data folder)")


def open_store(args):
    from sqlalchemy.exc import ArgumentError, OperationalError

    from capscope.db import Store

    try:
        return Store(args.db)
    except ArgumentError as err:
        raise CapscopeError(f"bad database URL: {err}") from None
    except OperationalError as err:
        raise CapscopeError(f"cannot open the database: {err.orig}") from None
