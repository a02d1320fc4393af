"""`capscope diagnose`: what captioning models get wrong, and whether one is
better than another, from their whole output (`run`), added up (`summary`),
with error kinds (`error_types`), n-gram scores (`ngrams`) and a report
(`report`)."""

from .diagnosis import DiagnosisSummary
from .run import diagnose_captioners

__all__ = ["DiagnosisSummary", "diagnose_captioners"]
