"""The one reader of the user's files: each way a file can be wrong is refused in one line, fast, before anything walks it.

Every refusal has a control beside it that loads, so the limits stop attacks and
mistakes without stopping the files people write (aliases, merge keys, a BOM, quoted keys).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dra_harness import yamlfile

MALFORMED = Path(__file__).resolve().parents[2] / "fixtures" / "malformed"


class Bad(ValueError):
    pass


def _load(path: Path) -> object:
    return yamlfile.load(path, Bad, f"file {path}")


def _refusal(path: Path) -> str:
    with pytest.raises(Bad) as e:
        _load(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"file {path}: "), msg
    return msg


def _write(tmp_path: Path, content: str | bytes, name: str = "f.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize("name", ["alias-bomb.yaml", "merge-bomb.yaml"])
def test_an_alias_bomb_is_refused_before_it_is_expanded(name):
    started = time.monotonic()
    msg = _refusal(MALFORMED / name)
    assert time.monotonic() - started < 2, "the loader expanded the aliases"
    assert "aliases expand to more than 1,000,000 nodes" in msg


def test_aliases_and_merge_keys_that_stay_small_load(tmp_path):
    path = _write(tmp_path, "base: &b {devices: 8, model: x}\nnodes:\n  a: {<<: *b}\n  b: {<<: *b, devices: 4}\nsame: *b\n")
    assert _load(path) == {"base": {"devices": 8, "model": "x"}, "same": {"devices": 8, "model": "x"},
                           "nodes": {"a": {"devices": 8, "model": "x"}, "b": {"devices": 4, "model": "x"}}}


def test_a_node_that_contains_its_own_alias_is_refused():
    assert "an alias refers to a node that contains it" in _refusal(MALFORMED / "self-alias.yaml")


def test_nesting_beyond_the_limit_is_refused_and_below_it_loads(tmp_path):
    deep = _write(tmp_path, "a: " + "[" * 150 + "]" * 150, "deep.yaml")
    assert f"nested deeper than {yamlfile.MAX_DEPTH} levels" in _refusal(deep)
    fine = _write(tmp_path, "a: " + "[" * 50 + "]" * 50, "fine.yaml")
    assert isinstance(_load(fine), dict)


def test_a_file_over_the_size_limit_is_refused_without_reading_it_all(tmp_path):
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as f:
        f.truncate(1 << 30)  # sparse: a gigabyte that costs no disk
    assert f"is larger than {yamlfile.MAX_BYTES // 2**20} MiB" in _refusal(huge)
    at_limit = _write(tmp_path, "a: " + "x" * (yamlfile.MAX_BYTES - 4) + "\n", "at-limit.yaml")
    assert len(_load(at_limit)["a"]) == yamlfile.MAX_BYTES - 4


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x00\x01binary\x00", "is binary (it contains NUL bytes), not text"),
        (b"name: \xff\xfe\n", "is not UTF-8 text (byte 0xff at offset 6)"),
        (b"name: \x07\n", "is not valid YAML: unacceptable character #x0007"),
    ],
)
def test_binary_and_non_utf8_files_are_refused(tmp_path, content, message):
    assert message in _refusal(_write(tmp_path, content))


def test_utf8_text_with_a_byte_order_mark_loads(tmp_path):
    assert _load(_write(tmp_path, "\ufeffname: Grafikkarte für Ärzte\n".encode())) == {"name": "Grafikkarte für Ärzte"}


@pytest.mark.parametrize("content", ["", "\n\n", "# only a comment\n"])
def test_a_file_without_a_document_is_empty(tmp_path, content):
    assert _refusal(_write(tmp_path, content)).endswith(": is empty")


@pytest.mark.parametrize(
    "name, kind",
    [("scalar.yaml", "a string"), ("list.yaml", "a list")],
)
def test_a_document_that_is_not_a_mapping_is_named_as_what_it_is(name, kind):
    assert f"(top level): is {kind}, not a mapping of fields" in _refusal(MALFORMED / name)


def test_a_second_document_is_refused(tmp_path):
    assert "expected a single document" in _refusal(_write(tmp_path, "a: 1\n---\nb: 2\n"))


def test_non_string_keys_are_refused_with_their_field_and_quoted_ones_load(tmp_path):
    assert "nodes: key 123 is an integer, not a string (quote it)" in _refusal(_write(tmp_path, "nodes: {123: {devices: 1}}\n"))
    assert "a.0: key True is a boolean" in _refusal(_write(tmp_path, "a: [{yes: 1}]\n"))
    assert _load(_write(tmp_path, "nodes: {'123': {devices: 1}}\n")) == {"nodes": {"123": {"devices": 1}}}


@pytest.mark.parametrize(
    "content, message",
    [
        ("when: 2024-13-45\n", "a value cannot be read: month must be in 1..12"),
        ("count: " + "9" * 5000 + "\n", "a value cannot be read: Exceeds the limit (4300 digits)"),
        ("a: !!python/object:os.system x\n", "is not valid YAML: could not determine a constructor"),
    ],
)
def test_a_value_that_cannot_be_constructed_is_one_line(tmp_path, content, message):
    assert message in _refusal(_write(tmp_path, content))


def test_a_directory_a_missing_file_and_a_path_through_a_file_cannot_be_read(tmp_path):
    assert _refusal(tmp_path).endswith(": is a directory, not a file")
    assert _refusal(tmp_path / "missing.yaml").endswith(": cannot read: No such file or directory")
    afile = _write(tmp_path, "a: 1\n")
    assert _refusal(afile / "child.yaml").endswith(": cannot read: Not a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_a_file_without_read_permission_cannot_be_read(tmp_path):
    path = _write(tmp_path, "a: 1\n")
    path.chmod(0)
    assert _refusal(path).endswith(": cannot read: Permission denied")


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "is empty"),
        ("[1, 2]", "(top level): is a list, not a JSON object"),
        ('"text"', "(top level): is a string, not a JSON object"),
        ('{"a": ', "is not valid JSON: Expecting value"),
        ('{"a": ' + "[" * 150 + "]" * 150 + "}", f"nested deeper than {yamlfile.MAX_DEPTH} levels"),
        ("[" * 100_000 + "]" * 100_000, f"nested deeper than {yamlfile.MAX_DEPTH} levels"),
    ],
)
def test_a_json_file_fails_as_a_yaml_file_does(tmp_path, content, message):
    path = _write(tmp_path, content, "f.json")
    with pytest.raises(Bad) as e:
        yamlfile.load_json(path, Bad, f"file {path}")
    assert message in str(e.value) and "\n" not in str(e.value)
    assert yamlfile.load_json(_write(tmp_path, '{"a": [1]}', "ok.json"), Bad, "ok") == {"a": [1]}
