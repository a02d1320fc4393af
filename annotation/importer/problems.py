"""What an import reports: the tally and one `RejectedRow` (line, id, reason) per rejected row."""
from __future__ import annotations

from dataclasses import dataclass, field

from capscope.metrics.row_errors import RowError


class RowProblem(RowError):
    """Why one input row cannot be imported (a row error, as a row that cannot be scored is);
    the import goes on and reports it as a `RejectedRow`."""


@dataclass
class RejectedRow:
    line: int
    id: str | None
    reason: str

    def __str__(self) -> str:
        where = f"line {self.line}" + (f" (id {self.id!r})" if self.id is not None else "")
        return f"{where}: {self.reason}"


@dataclass
class ImportReport:
    added: int = 0
    unchanged: int = 0
    updated: int = 0
    images_added: int = 0
    regions_proposed: int = 0
    gold_added: int = 0  # rows that came with gold labels (CapTokenEval)
    errors: list[RejectedRow] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.added} added, {self.updated} updated, {self.unchanged} unchanged, "
            f"{len(self.errors)} rejected; {self.images_added} new images, "
            f"regions proposed for {self.regions_proposed}"
        )
