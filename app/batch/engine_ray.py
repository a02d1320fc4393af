"""`--engine ray`: `capscope score`, `features` and `correlate` on a Ray cluster.

The only module of capscope that imports Ray. The commands hand over a task
(what one worker builds once and how it turns a batch of items into results)
and get the results back in input order; reading, resuming and writing stay
with the command, as in a local run.

- `results` (score, features): the items, cut into the batches a local run
  would score and read only as the workers need them, go to a pool of actors,
  each holding one worker built from the task (one `Scorer`, its image-feature
  cache kept between batches); results come back in submission order.
- `ScorerPool` (correlate): persistent actors behind a `score_batch` that looks
  like the Scorer's, because correlate calls it many times and a dataset per
  call would build the models again each time.

Actors restart when their process dies (killed, out of memory) and their
unfinished batches run again; Ray hands back one result per submitted batch,
so a result is written once and in order whatever happens underneath.
"""
from __future__ import annotations

import itertools
import logging
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from capscope.batch.command_scorer import build_scorer
from capscope.batch.resume import batched
from capscope.common.errors import CapscopeError

log = logging.getLogger("capscope")

MISSING_RAY = 'the ray engine needs Ray: pip install -e ".[ray]"'
FORWARDED_ENV_PREFIX = "CAPSCOPE_"  # model paths and switches the workers must see as the driver does
# Ray Core actors: restart a dead actor, run its unfinished calls again (their results come back once).
RETRY_FOREVER = {"max_restarts": -1, "max_task_retries": -1}
IN_FLIGHT = 2  # batches per worker submitted ahead: one running, one queued


@dataclass(frozen=True)
class Cluster:
    """Where and how wide: `address` None means RAY_ADDRESS, else a cluster
    started on this machine, else a new local one (ray.init's own rule)."""
    address: str | None = None
    workers: int | None = None             # None: one per GPU, else half the CPUs
    gpus_per_worker: float | None = None   # None: 1 where the cluster has GPUs and the device allows
    device: str = "auto"


def import_ray():
    try:
        import ray
    except ImportError:
        raise CapscopeError(MISSING_RAY) from None
    return ray


def connect(cluster: Cluster):
    """Ray, connected (a driver that already called ray.init keeps its cluster)."""
    ray = import_ray()
    if not ray.is_initialized():
        try:
            ray.init(address=cluster.address, log_to_driver=True)
        except ConnectionError as err:
            raise CapscopeError(f"cannot reach the Ray cluster at {cluster.address or 'auto'}: {err}") from None
    return ray


def pool_shape(ray, cluster: Cluster) -> tuple[int, float]:
    """(number of workers, GPUs per worker) from the options and the cluster's resources."""
    resources = ray.cluster_resources()
    gpus, cpus = resources.get("GPU", 0.0), resources.get("CPU", 1.0)
    per_worker = cluster.gpus_per_worker
    if per_worker is None:
        per_worker = 1.0 if gpus >= 1 and cluster.device != "cpu" else 0.0
    if cluster.workers is not None:
        workers = cluster.workers
    elif per_worker > 0:
        workers = max(1, int(gpus // per_worker))
    else:
        workers = max(1, int(cpus) // 2)
    if per_worker * workers > gpus:
        raise CapscopeError(f"{workers} workers x {per_worker:g} GPUs need {per_worker * workers:g} GPUs; "
                            f"the cluster has {gpus:g}")
    if workers > cpus:
        log.warning("ray: %d workers take one CPU each; the cluster has %g CPUs now, so some wait for more",
                    workers, cpus)
    log.info("ray: %d workers, %g GPUs each, on a cluster with %g CPUs and %g GPUs", workers, per_worker, cpus, gpus)
    return workers, per_worker


def actor_options(per_worker: float) -> dict:
    """One CPU (Ray then gives torch one thread) and the GPU share of each worker."""
    options = {"num_cpus": 1, "num_gpus": per_worker}
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIX)}
    if env:
        options["runtime_env"] = {"env_vars": env}
    return options


# ---------------------------------------------------------------- score, features: a streamed actor pool

class TaskActor:
    """One worker of the pool: the task's worker built once (one `Scorer`, its
    image-feature cache kept between batches), fed whole batches, so that a
    batch holds the same rows as in a local run."""

    def __init__(self, task):
        self.work = task.worker()

    def run(self, batch: list) -> list:
        return self.work(batch)


def results(task, items: Iterable, batch_size: int, cluster: Cluster) -> Iterator:
    """The task's results for `items`, one per item, in input order. Items are
    read as the workers need them: at most IN_FLIGHT batches per worker wait on
    the driver, whatever the input's size."""
    batches = batched(items, batch_size)
    first = next(batches, None)
    if first is None:
        return iter(())
    ray = connect(cluster)
    workers, per_worker = pool_shape(ray, cluster)
    named = type(f"{type(task).__name__}Actor", (TaskActor,), {})  # ScoreTaskActor, ..., as Ray shows it
    remote = ray.remote(**actor_options(per_worker), **RETRY_FOREVER)(named)
    actors = [remote.remote(task) for _ in range(workers)]
    return _streamed(ray, actors, itertools.chain([first], batches), IN_FLIGHT * workers)


def _streamed(ray, actors: list, batches: Iterable[list], window: int) -> Iterator:
    from ray.util import ActorPool

    pool = ActorPool(actors)
    waiting = 0
    try:
        with worker_errors():
            for batch in batches:
                pool.submit(lambda actor, part: actor.run.remote(part), batch)
                waiting += 1
                if waiting >= window:
                    yield from pool.get_next()
                    waiting -= 1
            while pool.has_next():
                yield from pool.get_next()
    finally:
        for actor in actors:
            ray.kill(actor)


@contextmanager
def worker_errors():
    """An error a user can fix raised in a worker (a checkpoint that cannot be
    had, say) shown as its one line instead of a Ray traceback."""
    try:
        yield
    except Exception as err:
        cause = _capscope_cause(err)
        if cause is None:
            raise
        raise CapscopeError(f"ray worker: {cause}") from None


def user_errors(stream: Iterable) -> Iterator:
    with worker_errors():
        yield from stream


def _capscope_cause(err: BaseException | None, depth: int = 0) -> CapscopeError | None:
    """The innermost CapscopeError under `err` (Ray's task errors wear their
    cause's class too, so look under them first)."""
    if err is None or depth > 8:
        return None
    for inner in (getattr(err, "cause", None), err.__cause__, err.__context__):
        if inner is not err:
            found = _capscope_cause(inner, depth + 1)
            if found is not None:
                return found
    return err if isinstance(err, CapscopeError) else None


# ---------------------------------------------------------------- correlate: persistent actors

class ScorerActor:
    """One Scorer in an actor, for `ScorerPool`."""

    def __init__(self, options):
        self.scorer = build_scorer(options)

    def demo(self) -> bool:
        return bool(self.scorer.demo)

    def score_batch(self, rows, base_dir=None, only=None) -> list[dict]:
        return self.scorer.score_batch(rows, base_dir=base_dir, only=only)

    def word_threshold_scale(self, metric: str) -> float:
        return self.scorer.word_threshold_scale(metric)


class ScorerPool:
    """`score_batch` over a pool of actors: a batch is cut into one slice per
    worker and the slices come back in order. Give it batches `workers` times
    the size one Scorer takes, so that every worker has a slice."""

    def __init__(self, options, cluster: Cluster):
        from ray.util import ActorPool

        ray = connect(cluster)
        self._ray = ray
        self.workers, per_worker = pool_shape(ray, cluster)
        remote = ray.remote(**actor_options(per_worker), **RETRY_FOREVER)(ScorerActor)
        self.actors = [remote.remote(options) for _ in range(self.workers)]
        self.pool = ActorPool(self.actors)
        with worker_errors():
            self.demo = ray.get(self.actors[0].demo.remote())
        self._nlp = None

    @property
    def nlp(self):
        """spaCy on the driver, for what correlate does with tokens after scoring."""
        if self._nlp is None:
            from capscope.metrics.text import load_spacy

            self._nlp = load_spacy("en_core_web_sm")
        return self._nlp

    def word_threshold_scale(self, metric: str) -> float:
        with worker_errors():
            return self._ray.get(self.actors[0].word_threshold_scale.remote(metric))

    def score_batch(self, rows: list[dict], base_dir=None, only=None) -> list[dict]:
        if not rows:
            return []
        base_dir = None if base_dir is None else Path(base_dir).resolve()  # workers need not share our cwd
        size = math.ceil(len(rows) / self.workers)
        slices = [rows[start : start + size] for start in range(0, len(rows), size)]
        scored = self.pool.map(lambda actor, part: actor.score_batch.remote(part, base_dir, only), slices)
        return [row for part in user_errors(scored) for row in part]

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
