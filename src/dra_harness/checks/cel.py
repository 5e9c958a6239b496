"""Evaluate DRA CEL selectors offline against published devices (cel-python).

The API server and scheduler remain the ground truth; this exists so the harness can
say *which* devices a selector matches, and when it matches none, which attribute or
capacity it names that no device publishes (the likely typo). The environment mirrors
Kubernetes' DRA CEL: ``device.driver``, ``device.attributes[domain].name``,
``device.capacity[domain].name`` and the ``quantity()``/``semver()`` libraries, whose
comparisons are methods (``compareTo``, ``isGreaterThan``, ``isLessThan``). What Kubernetes'
type checker refuses (``>=`` between quantities) is refused here too (:mod:`.celtypes`), before
cel-python, which is dynamically typed, would evaluate it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache, total_ordering
from typing import Any

import celpy
import celpy.celtypes as ct
from celpy import celparser, evaluation

from dra_harness.checks import celtypes
from dra_harness.errors import CheckError

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, Fraction | int] = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")


@total_ordering
class _Ordered:
    """A CEL value compared by ``key`` (an exact number or a version tuple)."""

    key: Any

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.key == other.key

    def __lt__(self, other: _Ordered) -> bool:
        return self.key < other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.text!r})"  # type: ignore[attr-defined]


class Quantity(_Ordered):
    """A Kubernetes resource quantity, exact (a Fraction)."""

    def __init__(self, text: str) -> None:
        m = _QUANTITY.match(str(text).strip())
        if not m:
            raise ValueError(f"invalid quantity {text!r}")
        number, exponent, suffix = m.groups()
        value = Fraction(number)
        if exponent:
            value *= Fraction(10) ** int(exponent[1:])
        elif suffix in _BINARY:
            value *= _BINARY[suffix]
        else:
            value *= _DECIMAL[suffix or ""]
        self.value = self.key = value
        self.text = str(text)


class Semver(_Ordered):
    def __init__(self, text: str) -> None:
        m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", str(text))
        if not m:
            raise ValueError(f"invalid semver {text!r}")
        self.parts = self.key = tuple(int(p) for p in m.groups())
        self.text = str(text)


def _compare(a: Any, b: Any) -> ct.IntType:
    return ct.IntType((a > b) - (a < b))


FUNCTIONS = {
    "quantity": lambda s: Quantity(str(s)),
    "semver": lambda s: Semver(str(s)),
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: ct.BoolType(a > b),
    "isLessThan": lambda a, b: ct.BoolType(a < b),
    "asInteger": lambda q: ct.IntType(int(q.value)),
    "asApproximateFloat": lambda q: ct.DoubleType(float(q.value)),
    "major": lambda v: ct.IntType(v.parts[0]),
    "minor": lambda v: ct.IntType(v.parts[1]),
    "patch": lambda v: ct.IntType(v.parts[2]),
}


class SelectorError(CheckError):
    """The expression does not compile."""


@lru_cache(maxsize=512)
def _compiled(expression: str):
    """(program, the type checker's objection or ""), as the API server would see the selector."""
    env = celpy.Environment()
    try:
        tree = env.compile(expression)
    except celparser.CELParseError as e:
        raise SelectorError(f"selector does not compile: {expression}") from e
    try:
        celtypes.check(tree)
        objection = ""
    except celtypes.TypeCheckError as e:
        objection = str(e)
    # Our functions return Quantity and Semver objects, which celpy passes through but does not type.
    return env.program(tree, functions=FUNCTIONS), objection  # type: ignore[arg-type]


def _program(expression: str):
    return _compiled(expression)[0]


def rejection(expression: str) -> str:
    """Why the API server's type checker rejects ``expression`` ("" when it compiles), offline."""
    return _compiled(expression)[1]


def _value(attr: dict) -> Any:
    if "int" in attr:
        return ct.IntType(attr["int"])
    if "bool" in attr:
        return ct.BoolType(attr["bool"])
    if "version" in attr:
        return Semver(attr["version"])
    return ct.StringType(attr.get("string", ""))


def _split(name: str, driver: str) -> tuple[str, str]:
    domain, _, short = name.rpartition("/")
    return (domain or driver), short


def activation(driver: str, device: dict) -> dict:
    """The ``device`` variable for one published device."""
    attributes: dict = {}
    for name, attr in (device.get("attributes") or {}).items():
        domain, short = _split(name, driver)
        attributes.setdefault(ct.StringType(domain), ct.MapType())[ct.StringType(short)] = _value(attr)
    capacity: dict = {}
    for name, cap in (device.get("capacity") or {}).items():
        domain, short = _split(name, driver)
        capacity.setdefault(ct.StringType(domain), ct.MapType())[ct.StringType(short)] = Quantity(cap["value"])
    return {
        "device": ct.MapType({
            ct.StringType("driver"): ct.StringType(driver),
            ct.StringType("attributes"): ct.MapType(attributes),
            ct.StringType("capacity"): ct.MapType(capacity),
            ct.StringType("allowMultipleAllocations"): ct.BoolType(bool(device.get("allowMultipleAllocations"))),
        })
    }


@dataclass(frozen=True)
class Outcome:
    matched: bool
    error: str = ""
    #: The API server would refuse the selector itself (``error`` says why): nothing can match.
    rejected: bool = False


def evaluate(expression: str, driver: str, device: dict) -> Outcome:
    """Whether ``device`` (as published by ``driver``) satisfies ``expression``.

    A runtime error (typically a missing attribute) counts as no match, as in the
    scheduler, and is reported in ``error``.
    """
    program, objection = _compiled(expression)
    if objection:
        return Outcome(False, objection, rejected=True)
    try:
        result = program.evaluate(activation(driver, device))
    except evaluation.CELEvalError as e:
        return Outcome(False, str(e.args[0]) if e.args else str(e))
    if isinstance(result, evaluation.CELEvalError):
        return Outcome(False, str(result.args[0]) if result.args else str(result))
    if not isinstance(result, ct.BoolType):  # compiled as dyn; the scheduler refuses a non-bool at evaluation
        return Outcome(False, f"the selector evaluated to {type(result).__name__.removesuffix('Type').lower()}, not a bool")
    return Outcome(bool(result))


_REFERENCE = re.compile(r"device\.(attributes|capacity)\[\s*['\"]([^'\"]+)['\"]\s*\]\.(\w+)")


def references(expression: str) -> list[tuple[str, str, str]]:
    """``(kind, domain, name)`` of every attribute or capacity an expression reads."""
    return [(kind, domain, name) for kind, domain, name in _REFERENCE.findall(expression)]
