"""capscope: token- and region-level caption evaluation.

    import capscope

    scorer = capscope.Scorer(["infometic", "clip-s"], device="cpu")
    summary = capscope.diagnose_captioners({"mine": "results.json"}, "out/", annotations="annotations.json",
                                           images="val2014/")

The names of `__all__` are imported on first use, so that `import capscope`
(and `capscope --help`) loads no model code.
"""

__version__ = "0.1.0"

_HOMES = {
    "Scorer": "capscope.metrics.scorer",
    "ScorerConfig": "capscope.metrics.config",
    "metric_names": "capscope.metrics.registry",
    "METRIC_NAMES": "capscope.metrics.registry",
    "diagnose_captioners": "capscope.diagnose",
    "DiagnosisSummary": "capscope.diagnose",
    "CapscopeError": "capscope.common.errors",
    "ModelUnavailable": "capscope.common.errors",
}

__all__ = ["__version__", *_HOMES]


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'capscope' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
