"""Model versions on a running server: fine-tuning jobs and activation.

`TrainingJobs` fine-tunes InfoMetIC on a dataset's labels in a background
thread (one job at a time), with progress and cancel. A finished job's
checkpoint is written under the server's models folder and recorded as a
model version, not activated. A failed or cancelled job leaves no file and no
version behind, and changes neither the store nor the active model.

`Activations` makes a version the server's model: the new scorer is built
beside the old one, the store records the choice (a restarted server loads
it), the scorer is swapped in one step (calls already scoring finish on the
old one), then the version's dataset's queued items are scored again in the
background, their predictions stored under the version's tag and the queue
order refreshed.
"""
from __future__ import annotations

import itertools
import logging
import threading
from datetime import datetime, timezone
from pathlib import Path

from capscope.annotation import audit
from capscope.annotation import model_versions as mv
from capscope.annotation.refusals import Conflict, Invalid, NotFound
from capscope.db import Store, data_dir
from capscope.common.errors import ModelUnavailable, first_line
from capscope.server.scoring import Models
from capscope.train.finetune.defaults import HOLDOUT as DEFAULT_HOLDOUT, MINUTES as DEFAULT_MINUTES

log = logging.getLogger(__name__)

MAX_MINUTES = 240.0
MAX_STEPS = 1_000_000
RESCORE_LIMIT = 500  # queued items scored again after an activation
TERMINAL = ("done", "failed", "cancelled")


def models_folder(store: Store, given: str | Path | None = None) -> Path:
    """Where the server writes fine-tuned checkpoints: `given`, else a `models`
    folder beside the SQLite file, else the data folder's `models`."""
    if given is not None:
        return Path(given).expanduser()
    from sqlalchemy.engine import make_url

    parsed = make_url(store.url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:") \
            and not database.startswith("file:"):
        return Path(database).expanduser().resolve().parent / "models"
    return data_dir() / "models"


def default_checkpoint() -> Path:
    """The InfoMetIC file the server uses with no version active: the released
    checkpoint where it is installed, else the bundled demo model."""
    from capscope.metrics.loading import demo_model_path, env_or_cache

    released = env_or_cache("CAPSCOPE_INFOMETIC_CHECKPOINT", "infometic/best_model.pth")
    return released if released.is_file() else demo_model_path()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_budget(minutes, steps) -> tuple[float | None, int | None]:
    if minutes is not None and not (isinstance(minutes, (int, float)) and 0 < minutes <= MAX_MINUTES):
        raise Invalid(f"minutes must be above 0 and at most {MAX_MINUTES:g}, got {minutes!r}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS):
        raise Invalid(f"steps must be an integer from 1 to {MAX_STEPS}, got {steps!r}")
    if minutes is None and steps is None:
        minutes = DEFAULT_MINUTES
    return (float(minutes) if minutes is not None else None), steps


class TrainingJobs:
    """Fine-tuning jobs of one server, one running at a time."""

    def __init__(self, store: Store, models: Models, folder: Path, device: str = "auto"):
        self.store, self.models, self.folder, self.device = store, models, Path(folder), device
        self._lock = threading.Lock()
        self._jobs: dict[str, dict] = {}
        self._stop: dict[str, threading.Event] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._last: str | None = None
        self._ids = itertools.count(1)

    # ------------------------------------------------------------ the calls

    def start(self, dataset: str, init: str | int = "active", minutes: float | None = None,
              steps: int | None = None, holdout: float = DEFAULT_HOLDOUT, seed: int = 0, admin: str | None = None,
              check_dataset: str | None = None, augment: bool = False) -> str:
        """Check the request, then fine-tune in the background; returns the job id.
        `check_dataset`: another dataset whose labels are scored before and after
        (e.g. the parent's own world: does the child forget it?). `augment`: new
        brightness, contrast and mirroring of the images each step (`--augment`).
        Raises NotFound (dataset, version), Invalid (no labels, bad numbers), Conflict (a job is running)."""
        from capscope.train.finetune import CheckSet, FinetuneError, items_sha256, labelled, split_by_image

        minutes, steps = _check_budget(minutes, steps)
        if isinstance(holdout, bool) or not isinstance(holdout, (int, float)) or not 0 <= holdout < 1:
            raise Invalid(f"holdout must be in [0, 1), got {holdout!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
            raise Invalid(f"seed must be an integer from 0 to {2**32 - 1}, got {seed!r}")
        if not isinstance(augment, bool):
            raise Invalid(f"augment must be true or false, got {augment!r}")
        with self._lock:  # refuse early; checked again below before the thread starts
            self._refuse_if_running()
        init_path, parent_id = self._init(init)
        items = self._dataset_items(dataset, "to learn from")
        check = None
        if check_dataset is not None:
            checked = [item for item in self._dataset_items(check_dataset, "to check on") if labelled(item)]
            check = CheckSet({"dataset": check_dataset}, checked, Path("."))
        try:
            split_by_image(items, float(holdout), seed)
        except FinetuneError as err:
            raise Invalid(f"dataset {dataset!r}: {err}") from None
        labels = {"source": "dataset", "dataset": dataset, "sha256": items_sha256(items)}
        with self._lock:
            self._refuse_if_running()
            job_id = str(next(self._ids))
            job = {"id": job_id, "dataset": dataset, "init": init, "parent_file": init_path.name,
                   "parent_id": parent_id, "minutes": minutes, "steps": steps, "holdout": holdout, "seed": seed,
                   "augment": augment, "check_dataset": check_dataset, "admin": admin, "status": "running",
                   "stage": "starting", "fraction": 0.0, "step": None, "loss": None, "error": None, "version_id": None,
                   "started_at": _now(), "finished_at": None}
            self._jobs[job_id], self._stop[job_id], self._last = job, threading.Event(), job_id
            audit.record(self.store, "training started", actor=admin, target=dataset,
                         details={"job": job_id, "init": str(init), "minutes": minutes, "steps": steps})
            thread = threading.Thread(target=self._run, name=f"capscope-finetune-{job_id}", daemon=True,
                                      args=(job_id, init_path, parent_id, items, labels, check))
            self._threads[job_id] = thread
            thread.start()
        return job_id

    def job(self, job_id: str) -> dict:
        with self._lock:
            if job_id not in self._jobs:
                raise NotFound(f"no training job {job_id!r}")
            return dict(self._jobs[job_id])

    def last(self) -> dict | None:
        """The running job, else the latest one, else None."""
        with self._lock:
            return dict(self._jobs[self._last]) if self._last else None

    def cancel(self, job_id: str) -> dict:
        """Ask a running job to stop (it stops at its next step and writes nothing)."""
        with self._lock:
            if job_id not in self._jobs:
                raise NotFound(f"no training job {job_id!r}")
            if self._jobs[job_id]["status"] == "running":
                self._stop[job_id].set()
                self._jobs[job_id]["stage"] = "cancelling"
            return dict(self._jobs[job_id])

    def wait(self, job_id: str, timeout: float | None = None) -> dict:
        """The job once it has ended (for tests and the CLI)."""
        thread = self._threads.get(job_id)
        if thread is not None:
            thread.join(timeout)
        return self.job(job_id)

    # ------------------------------------------------------------ inside

    def _refuse_if_running(self) -> None:
        if self._last and self._jobs[self._last]["status"] == "running":
            raise Conflict(f"training job {self._last} is still running; cancel it or wait for it to end")

    def _dataset_items(self, dataset: str, purpose: str) -> list[dict]:
        """The dataset's CapTokenEval items (gold where set, else the judgements' majority); some must carry a label."""
        from capscope.annotation.browse import dataset_names
        from capscope.annotation.export import captokeneval_items
        from capscope.train.finetune import labelled

        if dataset not in dataset_names(self.store):
            raise NotFound(f"no dataset {dataset!r}")
        items = captokeneval_items(self.store, dataset)
        if not any(labelled(item) for item in items):
            raise Invalid(f"dataset {dataset!r} has no labels {purpose} (no gold labels and no submitted "
                          "judgements on its words or regions)")
        return items

    def _init(self, init) -> tuple[Path, int | None]:
        """(parent checkpoint file, its version id or None)."""
        from capscope.metrics.loading import demo_model_path

        if init == "demo":
            path, version_id = demo_model_path(), None
        elif init == "active":
            active = mv.active_version(self.store)
            path, version_id = (Path(active["path"]), active["id"]) if active else (default_checkpoint(), None)
        elif isinstance(init, int) and not isinstance(init, bool):
            version = mv.get_version(self.store, init)
            path, version_id = Path(version["path"]), version["id"]
        else:
            raise Invalid(f"init must be \"active\", \"demo\" or a model version id, got {init!r}")
        if not path.is_file():
            raise Invalid(f"the checkpoint to start from is missing: {path.name}")
        return path, version_id

    def _update(self, job_id: str, **changes) -> None:
        with self._lock:
            self._jobs[job_id].update(changes)

    def _on_progress(self, job_id: str, event: dict) -> None:
        changes = {"stage": event.get("stage"), "fraction": round(float(event.get("fraction") or 0.0), 4)}
        if "step" in event:
            changes["step"] = event["step"]
        if event.get("loss") is not None:
            changes["loss"] = round(float(event["loss"]), 5)
        self._update(job_id, **changes)

    def _run(self, job_id: str, init_path: Path, parent_id: int | None, items: list[dict], labels: dict,
             check) -> None:
        from capscope.common.checksums import file_sha256
        from capscope.train.finetune import Cancelled, FinetuneConfig, figures_path, finetune

        job = self.job(job_id)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        out = self.folder / f"infometic-{stamp}-job{job_id}.pt"
        stop = self._stop[job_id]
        config = FinetuneConfig(out=out, init=init_path, items=items, base_dir=Path("."), labels=labels,
                                holdout=float(job["holdout"]), minutes=job["minutes"], steps=job["steps"],
                                seed=job["seed"], augment=job["augment"], device=self.device,
                                token_rule=self.models.token_rule, check=check,
                                progress=False, on_progress=lambda event: self._on_progress(job_id, event),
                                should_stop=stop.is_set)
        try:
            if stop.is_set():
                raise Cancelled()
            report = finetune(config)
            if stop.is_set():
                raise Cancelled()
            parent_sha = report["parent"]["sha256"]
            if parent_id is None:
                known = mv.version_with_sha256(self.store, parent_sha)
                parent_id = known["id"] if known else None
            version = mv.add_version(self.store, path=out.resolve(), sha256=file_sha256(out),
                                     parent_sha256=parent_sha, parent_id=parent_id, dataset=job["dataset"],
                                     labels=report["labels"],
                                     figures={"before": report.get("before"), "after": report.get("after"),
                                              "training": report.get("training"),
                                              "holdout": report.get("holdout"), "check": report.get("check_gold"),
                                              "word_threshold": report.get("word_threshold")})
        except Cancelled:
            _remove(out, figures_path(out), out.with_name(out.name + ".tmp"))
            self._update(job_id, status="cancelled", stage="cancelled", finished_at=_now())
            return
        except Exception as err:  # noqa: BLE001 - any failure ends the job with its reason; nothing is kept
            log.warning("training job %s failed: %s", job_id, err, exc_info=True)
            _remove(out, figures_path(out), out.with_name(out.name + ".tmp"))
            self._update(job_id, status="failed", stage="failed", error=first_line(err), finished_at=_now())
            return
        self._update(job_id, status="done", stage="done", fraction=1.0, version_id=version["id"],
                     finished_at=_now())


def _remove(*paths: Path) -> None:
    for path in paths:
        try:
            Path(path).unlink(missing_ok=True)
        except OSError as err:
            log.warning("could not remove %s: %s", path, err)


class Activations:
    """Which model version the server scores with, and the re-scoring that follows a change."""

    def __init__(self, store: Store, models: Models, rescore_limit: int | None = RESCORE_LIMIT):
        self.store, self.models, self.rescore_limit = store, models, rescore_limit
        self._lock = threading.Lock()  # one activation at a time: store and scorer change in the same order
        self._status_lock = threading.Lock()
        self._rescoring: dict | None = None
        self._rescore_stop = threading.Event()
        self._rescore_thread: threading.Thread | None = None

    def load_active(self) -> None:
        """At start-up: point the (not yet built) scorer at the stored active version."""
        active = mv.active_version(self.store)
        if active is None:
            return
        if not Path(active["path"]).is_file():
            log.warning("active model version %s: checkpoint %s is missing; using the default model",
                        active["id"], active["path"])
            return
        self.models.checkpoint, self.models.version = active["path"], mv.version_tag(active)

    def activate(self, version_id: int | None, dataset: str | None = None, rescore: bool = True) -> dict:
        """Build the version's scorer (None: the server's default model), record
        it as active, swap it in, then (with `rescore`) score `dataset` again in
        the background: by default the version's own dataset, or for the default
        model the dataset of the version it replaces."""
        version = None if version_id is None else mv.get_version(self.store, version_id)
        if version is not None and not Path(version["path"]).is_file():
            raise Invalid(f"model version {version_id}'s checkpoint file is missing")
        if dataset is not None:
            from capscope.annotation.browse import dataset_names

            if dataset not in dataset_names(self.store):
                raise NotFound(f"no dataset {dataset!r}")
        checkpoint = version["path"] if version is not None else None
        with self._lock:
            replaced = mv.active_version(self.store)
            target = dataset if dataset is not None else (version or replaced or {}).get("dataset")
            try:
                scorer, unavailable = self.models.build_for(checkpoint)
            except ModelUnavailable as err:
                which = f"model version {version_id}" if version is not None else "the default model"
                raise Invalid(f"{which} cannot be loaded: {err}") from None
            mv.activate_version(self.store, version_id)
            tag = mv.version_tag(version) if version is not None else None
            self.models.swap(scorer, unavailable, checkpoint, tag)
            stored_as = tag or mv.DEFAULT_TAG
            rescoring = self._start_rescore(scorer, target, stored_as) if rescore and target else None
        audit.record(self.store, "model activated", target=stored_as, details={"version": version_id})
        return {"active": version_id, "model_version": stored_as, "rescoring": rescoring}

    def rescoring(self) -> dict | None:
        with self._status_lock:
            return dict(self._rescoring) if self._rescoring else None

    def wait_rescore(self, timeout: float | None = None) -> dict | None:
        thread = self._rescore_thread
        if thread is not None:
            thread.join(timeout)
        return self.rescoring()

    def _set(self, **changes) -> None:
        with self._status_lock:
            self._rescoring.update(changes)

    def _start_rescore(self, scorer, dataset: str, tag: str) -> dict:
        previous = self._rescore_thread
        self._rescore_stop.set()
        if previous is not None:
            previous.join()
        self._rescore_stop = threading.Event()
        with self._status_lock:
            self._rescoring = {"dataset": dataset, "model_version": tag, "state": "running", "done": 0,
                               "total": None, "scored": 0, "failed": 0, "limit": self.rescore_limit, "error": None}
        self._rescore_thread = threading.Thread(target=self._rescore, args=(scorer, dataset, tag, self._rescore_stop),
                                                name="capscope-rescore", daemon=True)
        self._rescore_thread.start()
        return self.rescoring()

    def _rescore(self, scorer, dataset: str, tag: str, stop: threading.Event) -> None:
        from capscope.annotation.queue import refresh_queue

        only = ["infometic"] if "infometic" in scorer.metrics else None

        def score_page(items: list[dict]) -> list[dict]:
            rows = [{"id": str(item["caption_id"]), "image": item["image"], "caption": item["caption"],
                     "references": item["references"], "regions": item["regions"], "tokens": item["tokens"]}
                    for item in items]
            return self.models.score_rows_on(scorer, rows, only=only)

        try:
            result = mv.rescore_queued(self.store, dataset, tag, score_page, limit=self.rescore_limit,
                                       on_progress=lambda done, total: self._set(done=done, total=total),
                                       should_stop=stop.is_set)
            if not result["stopped"]:
                refresh_queue(self.store, dataset, model_version=tag, token_rule=self.models.token_rule)
            self._set(state="stopped" if result["stopped"] else "done", total=result["total"],
                      scored=result["scored"], failed=result["failed"])
        except Exception as err:  # noqa: BLE001 - shown in the status; the activation itself stands
            log.warning("re-scoring %s with %s failed: %s", dataset, tag, err, exc_info=True)
            self._set(state="failed", error=first_line(err))
