"""Report sections declared once: what a suite records for a section and how the section reads.

Before this module a section was written twice (the Markdown and the HTML template) and found its
evidence by matching record keys, so a typo or a forgotten template showed as an empty section.
Here a section is one :class:`Section` (title, columns, a function from the run's results to rows,
the sentence shown when nothing ran); both templates render every registered section through one
generic table loop each. A suite names the section its record feeds (``evidence.record(section=...)``)
and an unknown name raises :class:`SectionError` at that call, as does a record of none of the shapes
the section declares (a TypedDict each: a misspelled key would otherwise leave a row out of the table);
a summary whose records name a section this harness cannot render raises at report time. Adding a
section: docs/report.md, "Adding a section".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

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
class Shape:
    """One kind of record a section renders: the TypedDict of its keys (required and ``NotRequired``), and
    which further keys it may carry (measurements named by a pattern, e.g. ``scheduler_dra_<point>_mean_s``)."""

    keys: Any  # a TypedDict class
    extra: Callable[[str], bool] | None = None

    def matches(self, values: Obj) -> bool:
        required, optional = set(self.keys.__required_keys__), set(self.keys.__optional_keys__)
        others = set(values) - required - optional
        return required <= set(values) and all(self.extra is not None and self.extra(k) for k in others)

    def describe(self) -> str:
        required = sorted(self.keys.__required_keys__)
        optional = sorted(self.keys.__optional_keys__)
        return (f"{self.keys.__name__}({', '.join(required)}"
                + (f"; optional {', '.join(optional)}" if optional else "") + ")")


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    columns: tuple[Column, ...]
    rows: Rows
    empty: str
    #: The kinds of record the section renders; a record of none of them is refused where it is recorded.
    shapes: tuple[Shape, ...] = ()

    def check(self, values: Obj) -> None:
        """Raise :class:`SectionError` unless ``values`` (a record, before its timestamp) has one of :attr:`shapes`."""
        if self.shapes and not any(s.matches(values) for s in self.shapes):
            raise SectionError(f"a record for report section {self.id!r} with keys {', '.join(sorted(values))} has none of "
                               f"its shapes: {'; '.join(s.describe() for s in self.shapes)}")

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
