"""Report sections declared once: what a suite records for a section and how the section reads.

Before this module a section was written twice (the Markdown and the HTML template) and found its
evidence by matching record keys, so a typo or a forgotten template showed as an empty section.
Here a section is one :class:`Section` (title, columns, a function from the run's results to rows,
the sentence shown when nothing ran); both templates render every registered section through one
generic table loop each. A suite names the section its record feeds (``evidence.record(section=...)``)
and an unknown name raises :class:`SectionError` at that call; a summary whose records name a section
this harness cannot render raises at report time. Adding a section: docs/report.md, "Adding a section".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from dra_harness.errors import InputError
from dra_harness.kube.types import Obj

Rows = Callable[[Obj], list[Obj]]
"""From the summary (its ``results``, each with ``evidence`` records, and ``allocations``) to table rows."""


class SectionError(InputError):
    """A section's contract is broken by its input (a suite's record, a run directory a newer harness wrote): it
    names no known section, or a section cannot render. The CLI prints it as one line."""


@dataclass(frozen=True)
class Column:
    title: str
    key: str
    #: text: as is; code: monospace; chip: a coloured outcome (colour from ``tone``, else the value itself).
    style: Literal["text", "code", "chip"] = "text"
    tone: Callable[[Obj], str] | None = None

    def tone_of(self, row: Obj) -> str:
        return self.tone(row) if self.tone else str(row.get(self.key, ""))


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    columns: tuple[Column, ...]
    rows: Rows
    empty: str

    def __post_init__(self) -> None:
        if not self.columns or not callable(self.rows):
            raise SectionError(f"report section {self.id!r} has no renderer: it needs columns and a rows function")
        if not self.id or not self.title or not self.empty:
            raise SectionError(f"report section {self.id!r} needs an id, a title and the sentence for an empty section")


_REGISTRY: dict[str, Section] = {}


def register(section: Section) -> Section:
    if section.id in _REGISTRY and _REGISTRY[section.id] is not section:
        raise SectionError(f"report section {section.id!r} is registered twice")
    _REGISTRY[section.id] = section
    return section


def unregister(section_id: str) -> None:
    """For tests that register a section of their own."""
    _REGISTRY.pop(section_id, None)


def known(section_id: str) -> Section:
    try:
        return _REGISTRY[section_id]
    except KeyError:
        raise SectionError(f"no report section {section_id!r} renders this record; known sections: "
                           f"{', '.join(sorted(_REGISTRY)) or 'none'} (docs/report.md, 'Adding a section')") from None


def records(summary: Obj, section: Section) -> Iterable[tuple[Obj, Obj]]:
    """(result, record) pairs for a section: records tagged with its id, and untagged ones of the suite concern
    of the same name (evidence written before records were tagged)."""
    for r in summary.get("results") or []:
        for rec in r.get("evidence") or []:
            tag = rec.get("section")
            if tag == section.id or (tag is None and r.get("concern") == section.id):
                yield r, rec


def rendered(summary: Obj) -> list[Obj]:
    """Every registered section with its rows, in registration order; a record naming an unknown section raises."""
    for r in summary.get("results") or []:
        for rec in r.get("evidence") or []:
            if rec.get("section") is not None:
                known(str(rec["section"]))
    return [{"section": s, "rows": s.rows(summary)} for s in _REGISTRY.values()]
