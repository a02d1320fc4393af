"""CLIP's text tower on ONNX Runtime, on the CPU.

A text pass on the CPU is short (one caption, a few phrases, 4-32 tokens), and
there PyTorch's eager kernels spend more time around the matrix products than
in them. Measured on 2 AMD EPYC cores, ViT-B-32's text transformer:

| pass          | eager, 1 thread | ONNX Runtime, 1 thread | eager, 2 | ONNX Runtime, 2 |
|---------------|-----------------|------------------------|----------|-----------------|
| 1 x 16 tokens | 31 ms           | 17.5 ms                | 24 ms    | 9 ms            |
| 4 x 16 tokens | 93 ms           | 53 ms                  | 58 ms    | 28 ms           |

with features within 4e-6 of eager's, which move InfoMetIC's scores by at
most 5e-6 (its logit scale of 100 included). InfoMetIC's head ran 1.5x faster
here too (46 against 31 ms for one pair) but moved the demo model's recall by
3.4e-4, past the 1e-4 a runtime may move a score, so it stays eager. The
image tower's passes (8 images of 50 tokens) are long matrix products, where
ONNX Runtime (1.07x), OpenVINO (1.04x) and `torch.compile` (0.99x) gained
nothing worth a second copy of the weights (BENCHMARKS.md run 14), so images
stay eager.

Each graph is exported once per architecture (torch.onnx's dynamo exporter,
dynamic batch and length) and kept in capscope's cache, keyed by the
module's structure, its weights' names and shapes and the versions that made
it: the export (10-15 s) is paid once per architecture and machine. Each
model's session is built from that graph with the model's own weights
(`with_weights`, about 1 s). Each pass keeps the fixed shape the caller gives
it, so a text's features do not depend on its neighbours here either, nor
on the thread count. The weights are read when the session is built: a model
trained afterwards needs a new backbone (the trainers build theirs eager).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch

from capscope.common.errors import ModelUnavailable

from .constants import RUNTIMES

OPSET = 18
log = logging.getLogger(__name__)


def onnxruntime_version() -> str | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime.__version__


def resolve_runtime(runtime: str, device: torch.device, precision: str) -> str:
    """`eager` or `onnx`: what `runtime` means on `device` at `precision`.
    `auto` is ONNX Runtime on the CPU in fp32 where it is installed; autocast
    precisions and GPUs stay eager."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose from {', '.join(RUNTIMES)}")
    if runtime == "eager":
        return "eager"
    fits = device.type == "cpu" and precision == "fp32"
    if runtime == "onnx":
        if not fits:
            raise ValueError("runtime: onnx runs the text tower on the CPU in fp32 only; "
                             f"this scorer runs on {device.type} in {precision} (use --runtime eager or auto)")
        if onnxruntime_version() is None:
            raise ModelUnavailable("runtime: onnx needs the onnxruntime package (pip install onnxruntime)")
        return "onnx"
    return "onnx" if fits and onnxruntime_version() is not None else "eager"


class _TextCore(torch.nn.Module):
    """What the text tower's graph holds: token embeddings in, projected
    features at the `<eot>` positions out."""

    def __init__(self, tower):
        super().__init__()
        self.transformer, self.ln_final = tower.transformer, tower.ln_final
        proj = tower.text_projection
        self.projection = proj if isinstance(proj, torch.nn.Linear) else None
        self.proj_matrix = None if isinstance(proj, torch.nn.Linear) else proj
        self.batch_first = getattr(tower.transformer, "batch_first", True)

    def forward(self, x, mask, eot):
        if self.batch_first:
            x = self.transformer(x, attn_mask=mask)
        else:
            x = self.transformer(x.permute(1, 0, 2), attn_mask=mask).permute(1, 0, 2)
        x = self.ln_final(x)
        x = torch.gather(x, 1, eot.view(-1, 1, 1).expand(-1, 1, x.shape[-1])).squeeze(1)
        return self.projection(x) if self.projection is not None else x @ self.proj_matrix


def text_tower_graph(tower, cache: Path) -> OnnxGraph:
    """`tower`'s transformer, last norm and projection: call with embedded
    tokens (rows x length x width), the causal mask cut to the length, and
    each row's `<eot>` index; returns rows x dim features."""
    core = _TextCore(tower).eval()
    width = core.ln_final.normalized_shape[0]
    rows, length = torch.export.Dim("rows", min=1, max=4096), torch.export.Dim("length", min=2, max=4096)
    example = (torch.zeros(2, 8, width), torch.zeros(8, 8), torch.tensor([7, 7]))
    return OnnxGraph("text", core, example, ("x", "mask", "eot"),
                     ({0: rows, 1: length}, {0: length, 1: length}, {0: rows}), cache)


class OnnxGraph:
    """A module on ONNX Runtime: called with tensors, returns its output as a
    tensor (or a tuple of tensors). The graph is exported once per
    architecture and cached; each session is built with the module's own
    weights (`with_weights`), one session per thread count."""

    def __init__(self, kind: str, core: torch.nn.Module, example: tuple, names: tuple, shapes: tuple, cache: Path):
        self.kind, self.core, self.example, self.names, self.shapes = kind, core, example, names, shapes
        self.cache = cache
        self.export_seconds: float | None = None  # None: the graph was found in the cache
        self.load_seconds = 0.0
        self._sessions: dict[int, object] = {}
        self._building = threading.Lock()

    def ready(self, threads: int) -> bool:
        """Whether the session for `threads` is built (the export and the build run on the caller's thread)."""
        return threads in self._sessions

    def __call__(self, *inputs: torch.Tensor):
        session = self._session(torch.get_num_threads())
        outputs = session.run(None, {name: x.detach().cpu().numpy() for name, x in zip(self.names, inputs)})
        tensors = tuple(torch.from_numpy(out) for out in outputs)
        return tensors[0] if len(tensors) == 1 else tensors

    def _session(self, threads: int):
        """One session per thread count, so that the server's one-thread
        re-scores (`common.threads.few_threads`) stay on one thread. Built
        under a lock: two threads' passes may ask for it at once."""
        with self._building:
            return self._built_session(threads)

    def _built_session(self, threads: int):
        if threads not in self._sessions:
            import onnxruntime as ort

            graph = self._graph()
            started = time.perf_counter()
            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            # no busy-waiting between passes: on a shared machine a spinning thread takes a core from others
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.log_severity_level = 3  # errors only: its notes on constant folding are not the user's
            self._sessions[threads] = ort.InferenceSession(with_weights(graph, self.core), options,
                                                           providers=["CPUExecutionProvider"])
            self.load_seconds += time.perf_counter() - started
        return self._sessions[threads]

    def _graph(self) -> Path:
        """The exported graph of this module's architecture, exported at its first use on this machine."""
        path = self.cache / f"{self.kind}-{self.architecture()}.onnx"
        if not path.is_file():
            started = time.perf_counter()
            export(self.core, self.example, self.names, self.shapes, path)
            self.export_seconds = time.perf_counter() - started
            log.info("exported the %s graph to ONNX in %.1f s (kept in %s)", self.kind, self.export_seconds, path)
        return path

    def architecture(self) -> str:
        """A digest of what the graph depends on: the module's structure, its
        weights' names and shapes (not their values: each session is built with
        its model's own, `with_weights`), and the versions that export and run it."""
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{torch.__version__} {onnxruntime_version()} {OPSET} {self.core!r}".encode())
        for name, tensor in self.core.state_dict().items():
            h.update(f"{name} {tuple(tensor.shape)} {tensor.dtype};".encode())
        return h.hexdigest()


def export(core: torch.nn.Module, example: tuple, names: tuple, shapes: tuple, path: Path) -> None:
    """`core` to an ONNX file at `path`, written whole or not at all. Unoptimised,
    so that each weight stays one initializer under its own name, which
    `with_weights` replaces with a model's own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=path.parent, suffix=".partial")
    os.close(handle)
    try:
        with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")  # the exporter's notes on opsets and shapes
            torch.onnx.export(core, example, partial, input_names=list(names), dynamic_shapes=shapes,
                              opset_version=OPSET, dynamo=True, external_data=False, optimize=False, verbose=False)
        check_initializers(partial, core)
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)


def with_weights(graph: Path, core: torch.nn.Module) -> bytes:
    """The graph at `graph` holding `core`'s weights: serialised whole, because
    ONNX Runtime folds constants (the weights' transposes) from the file's own
    initializers before any it is handed (`add_initializer`) replace them."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(graph))
    weights = core.state_dict()
    for init in model.graph.initializer:
        if init.name in weights:  # the rest are the forward's constants
            init.CopyFrom(numpy_helper.from_array(weights[init.name].detach().cpu().numpy(), init.name))
    return model.SerializeToString()


def check_initializers(path, core: torch.nn.Module) -> None:
    """Every weight of `core` is an initializer under its own name and shape:
    else a session would silently keep the exported weights. Other
    initializers are the forward's own constants, the same for every model."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    found = {i.name: tuple(i.dims) for i in graph.initializer}
    wrong = [name for name, t in core.state_dict().items() if found.get(name) != tuple(t.shape)]
    if wrong:
        raise RuntimeError(f"the ONNX export renamed, folded or dropped weights: {wrong[:5]}")
