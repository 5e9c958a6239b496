"""The user's files (hardware, design, profiles, scenarios, kubeconfigs, run JSON): read, check, fail in one line.

Why a module of its own: every file a user hands the harness must fail the same way,
naming the file, the field and the problem on one line and never with a traceback, and
durations must mean the same thing in a design file as in a scenario. The reading is
guarded too, because these files come from anywhere: a directory, a binary, a file of
gigabytes, or a YAML alias bomb (a few hundred bytes whose aliases expand to billions
of nodes) is refused before anything walks the document, so no check downstream
(jsonschema, the kubernetes client, a report) can be made to hang or to run out of memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import jsonschema
import yaml

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "": 1}

#: Far above any real hardware, design, scenario or kubeconfig file (kubeconfigs with
#: hundreds of embedded certificates stay under 2 MiB); reading stops one byte past it.
MAX_BYTES = 8 * 1024 * 1024
#: Nodes of the document with every alias expanded: what a consumer walking it would visit.
MAX_NODES = 1_000_000
#: Deeper documents would exhaust the recursion of jsonschema and json; real files nest < 15.
MAX_DEPTH = 100

# libyaml composes in C (and itself refuses nesting beyond 1000); both loaders are safe loaders.
_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_text(path: Path | str, error: type[Exception], prefix: str, max_bytes: int = MAX_BYTES) -> str:
    """The file's text, or ``error("<prefix>: <why>")`` for a directory, an unreadable, huge or binary file."""
    p = Path(path)
    if p.is_dir():
        raise error(f"{prefix}: is a directory, not a file")
    try:
        with open(p, "rb") as f:  # not read_bytes(): a pipe or /dev/zero has no size to check first
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise error(f"{prefix}: cannot read: {e.strerror or e}") from None
    if len(data) > max_bytes:
        raise error(f"{prefix}: is larger than {max_bytes // 2**20} MiB")
    return decode_text(data, error, prefix)


def decode_text(data: bytes, error: type[Exception], prefix: str) -> str:
    """Bytes read from a file as its text, or ``error("<prefix>: <why>")`` for a binary or non-UTF-8 one."""
    if b"\0" in data:
        raise error(f"{prefix}: is binary (it contains NUL bytes), not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{prefix}: is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


@contextmanager
def _reading(loader: Any, error: type[Exception], prefix: str) -> Iterator[None]:
    """Turn what a YAML loader raises into ``error("<prefix>: <why>")``, one line."""
    try:
        yield
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise error(f"{prefix}:{where} is not valid YAML: {_yaml_problem(e)}") from None
    except (ValueError, OverflowError) as e:
        if isinstance(e, error):
            raise
        # A scalar that resolves but does not convert: a 13th month, an integer of 5000 digits.
        why = " ".join(str(e).split(";")[0].split())
        raise error(f"{prefix}: a value cannot be read: {why[:200]}") from None
    except RecursionError:  # the pure-Python loader, without libyaml's nesting limit
        raise error(f"{prefix}: nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def load(path: Path | str, error: type[Exception], prefix: str) -> dict[str, Any]:
    """The file's top-level mapping, or ``error("<prefix>: <why>")`` for any file that is not one."""
    text = read_text(path, error, prefix)
    loader = _Loader(text)
    with _reading(loader, error, prefix):
        node = loader.get_single_node()
        if node is None:
            raise error(f"{prefix}: is empty")
        _check_expansion(node, error, prefix)
        data = loader.construct_document(node)
    if not isinstance(data, dict):
        raise error(f"{prefix}: (top level): is {_kind(data)}, not a mapping of fields")
    _check_keys(data, error, prefix, "")
    return data


def load_all(path: Path | str, error: type[Exception], prefix: str) -> list[dict[str, Any]]:
    """Every document of a multi-document file (``---``), each a mapping; empty documents are skipped."""
    text = read_text(path, error, prefix)
    loader = _Loader(text)
    docs: list[dict[str, Any]] = []
    with _reading(loader, error, prefix):
        while loader.check_node():
            node = loader.get_node()
            _check_expansion(node, error, prefix)
            data = loader.construct_document(node)
            if data is None:
                continue
            if not isinstance(data, dict):
                raise error(f"{prefix}: document {len(docs) + 1}: is {_kind(data)}, not a mapping of fields")
            _check_keys(data, error, prefix, "")
            docs.append(data)
    if not docs:
        raise error(f"{prefix}: is empty")
    return docs


def load_json(path: Path | str, error: type[Exception], prefix: str) -> dict[str, Any]:
    """A JSON object from a file (a run's summary.json, run.json), failing as :func:`load` does."""
    return parse_json(read_text(path, error, prefix), error, prefix)


def parse_json(text: str, error: type[Exception], prefix: str) -> dict[str, Any]:
    """A JSON object from a file's text, failing as :func:`load_json` does (for readers that open the file themselves)."""
    if not text.strip():
        raise error(f"{prefix}: is empty")
    try:
        data = json.loads(text)
    except RecursionError:  # json's own limit, near 1000 levels
        raise error(f"{prefix}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise error(f"{prefix}: is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise error(f"{prefix}: (top level): is {_kind(data)}, not a JSON object")
    if _json_depth(data) > MAX_DEPTH:
        raise error(f"{prefix}: nested deeper than {MAX_DEPTH} levels")
    return data


def _json_depth(data: Any) -> int:
    """How deep a parsed JSON document nests (a tree: JSON has no aliases)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, level = stack.pop()
        deepest = max(deepest, level)
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((c, level + 1) for c in children)
    return deepest


def _yaml_problem(e: yaml.YAMLError) -> str:
    """What the parser says, on one line: its context ("while parsing a flow sequence") and its problem."""
    if isinstance(e, yaml.reader.ReaderError):  # a control character: the file is not YAML text
        return str(e).splitlines()[0]
    parts = [getattr(e, "context", None), getattr(e, "problem", None)]
    return " ".join(": ".join(p for p in parts if p).split()) or e.__class__.__name__


def _kind(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number", bool: "a boolean", type(None): "null"}
    return names.get(type(value), f"a {type(value).__name__}")


def _check_expansion(root: yaml.Node, error: type[Exception], prefix: str) -> None:
    """Refuse a document whose aliases expand beyond :data:`MAX_NODES`, that nests too deep, or refers to itself.

    The composed graph shares one node per anchor, so this walk visits each node once
    (linear in the file) while counting what a full expansion would visit.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # iterative: libyaml composes 1000 levels, more than Python's recursion allows
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            on_path.discard(key)
            if size[key] > MAX_NODES:
                raise error(f"{prefix}: its aliases expand to more than {MAX_NODES:,} nodes (a YAML alias bomb?)")
            if depth[key] > MAX_DEPTH:
                raise error(f"{prefix}: nested deeper than {MAX_DEPTH} levels")
            continue
        if key in size:
            continue
        if key in on_path:
            raise error(f"{prefix}: an alias refers to a node that contains it")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_keys(data: Any, error: type[Exception], prefix: str, where: str) -> None:
    """Every mapping key is a string: ``123:`` or ``yes:`` would otherwise become a number or a boolean."""
    if isinstance(data, dict):
        for k, v in data.items():
            if not isinstance(k, str):
                raise error(f"{prefix}: {where or '(top level)'}: key {k!r} is {_kind(k)}, not a string (quote it)")
            _check_keys(v, error, prefix, f"{where}.{k}" if where else k)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            _check_keys(v, error, prefix, f"{where}.{i}" if where else str(i))


def field_path(err: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in err.absolute_path) or "(top level)"


_TYPES = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer", "number": "a number",
          "boolean": "a boolean", "null": "null"}
#: jsonschema's own message names only the schema and the file's keys for these; every other message quotes the value.
_KEYS_ONLY = {"required", "additionalProperties", "dependentRequired", "dependencies"}
#: What breaking each rule means, from the schema's side ({want}: the rule's own setting), never the value's.
_SAYS = {
    "const": "must be {want!r}", "pattern": "does not match the pattern {want}", "format": "is not a valid {want}",
    "minimum": "must be at least {want}", "maximum": "must be at most {want}",
    "exclusiveMinimum": "must be more than {want}", "exclusiveMaximum": "must be less than {want}",
    "multipleOf": "must be a multiple of {want}",
    "minLength": "must be at least {want} characters long", "maxLength": "must be at most {want} characters long",
    "minItems": "must hold at least {want} items", "maxItems": "must hold at most {want} items",
    "minProperties": "must hold at least {want} fields", "maxProperties": "must hold at most {want} fields",
    "uniqueItems": "must not hold the same item twice", "contains": "holds no item of the kind it needs",
    "oneOf": "matches none of the forms allowed here", "anyOf": "matches none of the forms allowed here",
    "not": "is a value not allowed here",
}


def problem(err: jsonschema.ValidationError) -> str:
    """What is wrong at ``err``'s field, told from the schema alone: never the value, which may be a credential.

    jsonschema's messages quote the offending value (``'get-token --secret X' is not of type 'object'``), and a
    kubeconfig's values are tokens, passwords and exec command lines; a CI log shows this line to everyone.
    """
    rule, want = str(err.validator), cast(Any, err.validator_value)
    if rule in _KEYS_ONLY:
        return " ".join(err.message.split())
    if rule == "type":
        wanted = [want] if isinstance(want, str) else list(want)
        return f"must be {' or '.join(_TYPES.get(t, t) for t in wanted)}, not {_kind(err.instance)}"
    if rule == "enum":
        return f"must be one of {', '.join(repr(x) for x in want)}"
    if rule == "oneOf" and not err.context:  # no branch's errors: more than one branch matched
        return "matches more than one form allowed here"
    if rule in ("minLength", "minItems", "minProperties") and want == 1:
        return "must not be empty"
    return _SAYS.get(rule, "is not valid here (schema rule {rule})").format(want=want, rule=rule)


def validate(data: Any, schema: dict, error: type[Exception], prefix: str) -> None:
    """Raise ``error("<prefix>: <field>: <problem>")`` for the first schema violation, naming no value (:func:`problem`)."""
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as e:
        raise error(f"{prefix}: {field_path(e)}: {problem(e)[:300]}") from None


def seconds(value: float | str) -> float:
    """``90``, ``"90s"``, ``"5m"``, ``"2h"``, ``"1d"`` -> seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", value)
    if not m:
        raise ValueError(f"not a duration: {value!r}")
    return float(m.group(1)) * _UNITS[m.group(2) or ""]
