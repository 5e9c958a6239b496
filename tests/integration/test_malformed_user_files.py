"""Every kind of file a user hands the harness, malformed every way, fails in one line naming it: CLI and pytest alike.

Issue 12: a binary, non-UTF-8, empty, scalar, list, unparseable, wrongly typed, alias-bomb,
huge, directory, missing or unreadable file gives a non-zero exit, exactly one line on stderr
that names the file, and no traceback, before any cluster is built or started; so these tests
need no cluster and take seconds. Each kind has a negative control: its well-formed file passes
the input check, and the command then stops at the next obstacle (a server nothing listens on,
a cluster that is not running), and that message names the obstacle, not the file.

The CLI is driven in-process (click's runner, the same ``main`` as the installed command) for
the whole table, and as a real process for one malformation per kind; pytest's options only
as a real process, since pytest prints its usage errors itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from dra_harness.cli.app import main
from dra_harness.yamlfile import MAX_BYTES
from dra_harness.options import RunConfig
from dra_harness.report.rundir import MARKER

ROOT = Path(__file__).resolve().parents[2]
MALFORMED = ROOT / "fixtures" / "malformed"
UNREACHABLE = ROOT / "fixtures" / "kubeconfigs" / "unreachable.yaml"
SERVER = "https://127.0.0.1:1"
GOOD_SUMMARY = ROOT / "tests" / "unit" / "data" / "recorded" / "summary-1.37.2.json"
GOOD_RUN_JSON = '{"run_id": "good", "command": ["dra-harness", "run"], "started": 1.0, "finished": 2.0, "complete": true, "exit_code": 0}\n'
NO_CLUSTER = "no-such-cluster"
#: How pytest prints a UsageError: ``ERROR: <message>``, then a blank line (nothing on stdout).
PYTEST_PREFIX = "ERROR: "


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Kind:
    """A kind of user file: where it is written, a well-formed one, and how a command is handed one."""

    name: str
    filename: str
    good: Path | None
    wrong_types: Path
    wrong_types_says: str
    cli: Callable[[Path, Path], list[str]]
    #: A run directory's file is named as itself, but when it is absent the directory is what is wrong.
    in_run_dir: bool = False

    @property
    def json(self) -> bool:
        return self.filename.endswith(".json")


def _run(flag: str, *extra: str) -> Callable[[Path, Path], list[str]]:
    return lambda path, tmp: ["run", *extra, flag, str(path), "--report-dir", str(tmp / "out")]


KINDS = {k.name: k for k in [
    Kind("hardware", "hardware.yaml", ROOT / "fixtures" / "hardware" / "embedded-default.yaml",
         MALFORMED / "wrong-types" / "hardware.yaml", "nodes.gpu-node-0.devices: must be an integer, not a string",
         _run("--expected-hardware")),
    Kind("design", "design.yaml", ROOT / "fixtures" / "designs" / "example.yaml",
         MALFORMED / "wrong-types" / "design.yaml", "workloadClasses: must be a list, not a mapping",
         _run("--design-file")),
    Kind("scenario", "scenario.yaml", ROOT / "suites" / "contention-small.yaml",
         MALFORMED / "wrong-types" / "scenario.yaml", "cluster.nodes: must be an integer, not a string",
         lambda path, tmp: ["contention", "run", str(path), "--cluster-name", NO_CLUSTER, "--out", str(tmp / "out")]),
    Kind("kubeconfig", "kubeconfig", UNREACHABLE, MALFORMED / "wrong-types" / "kubeconfig.yaml",
         "clusters: must be a list or null, not a mapping", _run("--kubeconfig", "--cluster", "existing")),
    Kind("kubeconfig-diagnose", "kubeconfig", UNREACHABLE, MALFORMED / "wrong-types" / "kubeconfig.yaml",
         "clusters: must be a list or null, not a mapping", lambda path, tmp: ["diagnose", "--kubeconfig", str(path)]),
    Kind("summary", "summary.json", GOOD_SUMMARY, MALFORMED / "wrong-types" / "summary.json",
         "results.0.outcome: must be a string, not an integer", lambda path, tmp: ["diff", str(path), str(GOOD_SUMMARY)]),
    Kind("run-json", "run.json", None, MALFORMED / "wrong-types" / "run.json",
         "command: must be a list, not a string", lambda path, tmp: ["report", str(path.parent)],
         in_run_dir=True),
]}


@dataclass(frozen=True)
class Malformation:
    """How a file is made wrong, and what its one line then says."""

    name: str
    make: Callable[[Path, Kind], Path]
    says: Callable[[Kind], str]
    yaml_only: bool = False


def _content(yaml_text: bytes, json_text: bytes) -> Callable[[Path, Kind], Path]:
    def make(path: Path, kind: Kind) -> Path:
        path.write_bytes(json_text if kind.json else yaml_text)
        return path
    return make


def _copy(source: Path | None = None) -> Callable[[Path, Kind], Path]:
    def make(path: Path, kind: Kind) -> Path:
        shutil.copyfile(source or kind.wrong_types, path)
        return path
    return make


def _huge(path: Path, kind: Kind) -> Path:
    with open(path, "wb") as f:
        f.truncate(MAX_BYTES + 1)  # sparse: no disk is spent
    return path


def _directory(path: Path, kind: Kind) -> Path:
    path.mkdir()
    return path


def _missing(path: Path, kind: Kind) -> Path:
    return path


def _through_a_file(path: Path, kind: Kind) -> Path:
    path.parent.joinpath("a-file").write_text("")
    return path.parent / "a-file" / path.name


def _unreadable(path: Path, kind: Kind) -> Path:
    path.write_text("a: 1\n")
    path.chmod(0)
    return path


MALFORMATIONS = [
    Malformation("nul-bytes", _content(b"\x00\x01\x02binary\x00", b"\x00\x01\x02binary\x00"),
                 lambda k: "is binary (it contains NUL bytes), not text"),
    Malformation("invalid-utf8", _content(b"name: \xff\xfe\xfd\n", b'{"a": "\xff\xfe"}'),
                 lambda k: "is not UTF-8 text (byte 0xff at offset"),
    Malformation("empty", _content(b"", b""), lambda k: "is empty"),
    Malformation("scalar", _content((MALFORMED / "scalar.yaml").read_bytes(), b'"just a string"'),
                 lambda k: "(top level): is a string, not a"),
    Malformation("list", _content((MALFORMED / "list.yaml").read_bytes(), b"[1, 2]"),
                 lambda k: "(top level): is a list, not a"),
    Malformation("unparseable", _content((MALFORMED / "not-yaml.yaml").read_bytes(), b'{"run_id": '),
                 lambda k: "is not valid JSON" if k.json else "line 3 is not valid YAML"),
    Malformation("wrong-types", _copy(), lambda k: k.wrong_types_says),
    Malformation("alias-bomb", _copy(MALFORMED / "alias-bomb.yaml"),
                 lambda k: "aliases expand to more than 1,000,000 nodes (a YAML alias bomb?)", yaml_only=True),
    Malformation("huge", _huge, lambda k: f"is larger than {MAX_BYTES // 2**20} MiB"),
    Malformation("directory", _directory,
                 lambda k: "is not a run directory" if k.name == "summary" else "is a directory, not a file"),
    Malformation("missing", _missing,
                 lambda k: "does not exist" if k.name == "summary" else "is not a run directory" if k.in_run_dir
                 else "cannot read: No such file or directory"),
    Malformation("path-through-a-file", _through_a_file,
                 lambda k: "does not exist" if k.name == "summary" else "cannot read: Not a directory"),
    Malformation("no-read-permission", _unreadable, lambda k: "cannot read: Permission denied"),
]

_ROOT_READS_ANYTHING = pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")


def _cases(kinds: list[str], names: list[str] | None = None) -> list:
    out = []
    for kind in kinds:
        for m in MALFORMATIONS:
            if (names and m.name not in names) or (m.yaml_only and KINDS[kind].json):
                continue
            if KINDS[kind].in_run_dir and m.name == "path-through-a-file":
                continue  # the run directory itself would be the path through a file
            marks = [_ROOT_READS_ANYTHING] if m.name == "no-read-permission" else []
            out.append(pytest.param(kind, m, id=f"{kind}-{m.name}", marks=marks))
    return out


def _mark(run_dir: Path) -> None:
    """The marker every run writes into its directory first: ``dra-harness report`` renders no other directory."""
    (run_dir / MARKER).write_text('{"run_id": "good", "finished": true, "files": ["run.json"]}\n')


def _malformed(tmp_path: Path, kind: Kind, m: Malformation) -> tuple[Path, Path]:
    """(the path handed to the command's file option, the path its error must name)."""
    folder = tmp_path / "run" if kind.in_run_dir else tmp_path
    folder.mkdir(exist_ok=True)
    if kind.in_run_dir and m.name != "missing":
        _mark(folder)  # a run's directory: only the file is malformed (without the marker it is no run's)
    path = m.make(folder / kind.filename, kind)
    named = folder if kind.in_run_dir and m.name == "missing" else path
    return path, named


def cli(args: list[str], env: dict[str, str] | None = None) -> Outcome:
    """The command line in-process; anything but an exit is a traceback the user would have seen."""
    result = CliRunner().invoke(main, args, env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        pytest.fail("".join(traceback.format_exception(*result.exc_info)))
    return Outcome(result.exit_code, result.stdout, result.stderr)


def process(args: list[str], env: dict[str, str] | None = None) -> Outcome:
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, **(env or {})})
    return Outcome(out.returncode, out.stdout, out.stderr)


def pytest_process(args: list[str], env: dict[str, str] | None = None) -> Outcome:
    return process([sys.executable, "-m", "pytest", "suites", "-q", "-p", "no:cacheprovider", *args], env)


def assert_one_line(out: Outcome, named: Path | str, says: str, prefix: str = "error: ") -> str:
    assert out.code != 0, out
    assert "Traceback" not in out.stdout + out.stderr, out.stderr
    lines = out.stderr.splitlines()
    if prefix == PYTEST_PREFIX:
        assert lines[1:] == [""], f"pytest writes its usage error and one blank line:\n{out.stderr}"
        lines = lines[:1]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{out.stderr}"
    line = lines[0]
    assert line.startswith(prefix), line
    assert str(named) in line, f"the line does not name {named}: {line}"
    assert says in line, f"expected {says!r} in: {line}"
    assert out.stdout.strip() == "", out.stdout
    return line


# -- the CLI --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, m", _cases(list(KINDS)))
def test_a_malformed_file_fails_the_cli_in_one_line_naming_it(tmp_path, kind, m):
    k = KINDS[kind]
    path, named = _malformed(tmp_path, k, m)
    assert_one_line(cli(k.cli(path, tmp_path)), named, m.says(k))
    assert not (tmp_path / "out").exists(), "the run wrote its directory before checking its input"


@pytest.mark.parametrize("m", [m for m in MALFORMATIONS if m.name in ("empty", "alias-bomb", "wrong-types", "missing")],
                         ids=lambda m: m.name)
def test_a_malformed_kubeconfig_from_the_environment_fails_the_cli_in_one_line(tmp_path, m):
    k = KINDS["kubeconfig"]
    path, named = _malformed(tmp_path, k, m)
    out = cli(["run", "--cluster", "existing", "--report-dir", str(tmp_path / "out")], env={"KUBECONFIG": str(path)})
    assert_one_line(out, named, m.says(k))


UNUSABLE_KUBECONFIGS = [
    ("no-such-context.yaml", [], "current-context names no context the file defines (contexts: nowhere)"),
    ("undefined-cluster.yaml", [], "context 'nowhere' names a cluster it does not define (clusters: nowhere)"),
    ("no-server.yaml", [], "cluster 'nowhere' has no server"),
    ("ca-not-a-certificate.yaml", [], "its certificate authority is unusable"),
    (UNREACHABLE, ["--context", "elsewhere"], "no context 'elsewhere' (contexts: nowhere)"),
]


@pytest.mark.parametrize("name, extra, says", UNUSABLE_KUBECONFIGS, ids=lambda v: Path(str(v)).stem if v else None)
@pytest.mark.parametrize("command", ["run", "diagnose"])
def test_a_well_formed_but_unusable_kubeconfig_fails_the_cli_in_one_line(tmp_path, command, name, extra, says):
    path = MALFORMED / "kubeconfig" / name
    args = ["run", "--cluster", "existing", "--report-dir", str(tmp_path / "out")] if command == "run" else ["diagnose"]
    assert_one_line(cli([*args, "--kubeconfig", str(path), *extra]), path, says)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_well_formed_file_passes_the_cli_input_check(tmp_path, kind):
    k = KINDS[kind]
    if k.name in ("hardware", "design"):
        # The file is good, so the run gets as far as the cluster, which nothing serves.
        out = cli([*k.cli(k.good, tmp_path), "--cluster", "existing", "--kubeconfig", str(UNREACHABLE)])
        line = assert_one_line(out, SERVER, "unreachable")
        assert str(k.good) not in line
    elif k.name == "scenario":
        line = assert_one_line(cli(k.cli(k.good, tmp_path)), f"'{NO_CLUSTER}'", "no running embedded cluster named")
        assert str(k.good) not in line
    elif k.name.startswith("kubeconfig"):
        line = assert_one_line(cli(k.cli(k.good, tmp_path)), SERVER, "unreachable")
        assert "kubeconfig" not in line
    elif k.name == "summary":
        out = cli(k.cli(k.good, tmp_path))
        assert out.code == 0 and "regressions (0)" in out.stdout, out
    else:
        (tmp_path / "run").mkdir()
        _mark(tmp_path / "run")
        (tmp_path / "run" / k.filename).write_text(GOOD_RUN_JSON)
        out = cli(k.cli(tmp_path / "run" / k.filename, tmp_path))
        assert out.code == 0 and out.stdout.strip().endswith("signoff.html"), out


def test_a_report_dir_that_is_a_file_fails_the_cli_in_one_line(tmp_path):
    afile = tmp_path / "a-file"
    afile.write_text("")
    assert_one_line(cli(["run", "--report-dir", str(afile)]), afile, "is a file")


@pytest.mark.parametrize("kind, m", [
    pytest.param(kind, next(m for m in MALFORMATIONS if m.name == ("nul-bytes" if KINDS[kind].json else "alias-bomb")),
                 id=kind) for kind in KINDS
])
def test_the_cli_as_a_process_prints_one_line_and_exits_non_zero(tmp_path, kind, m):
    k = KINDS[kind]
    path, named = _malformed(tmp_path, k, m)
    out = process([sys.executable, "-m", "dra_harness.cli", *k.cli(path, tmp_path)])
    assert out.code == 2
    assert_one_line(out, named, m.says(k))


# -- pytest's options -------------------------------------------------------------------------
PYTEST_OPTIONS = {
    "hardware": lambda path: [f"--expected-hardware={path}"],
    "kubeconfig": lambda path: ["--cluster=existing", f"--kubeconfig={path}"],
}


@pytest.mark.parametrize("kind, m", _cases(["hardware", "kubeconfig"]))
def test_a_malformed_file_fails_pytest_in_one_line_naming_it(tmp_path, kind, m):
    k = KINDS[kind]
    path, named = _malformed(tmp_path, k, m)
    out = pytest_process(PYTEST_OPTIONS[kind](path))
    assert out.code == 4  # pytest's usage error
    assert_one_line(out, named, m.says(k), prefix=PYTEST_PREFIX)


@pytest.mark.parametrize("kind, m", _cases(["kubeconfig"], ["empty", "alias-bomb", "wrong-types", "missing"]))
def test_a_malformed_kubeconfig_from_the_environment_fails_pytest_in_one_line(tmp_path, kind, m):
    path, named = _malformed(tmp_path, KINDS[kind], m)
    out = pytest_process(["--cluster=existing"], env={"KUBECONFIG": str(path)})
    assert_one_line(out, named, m.says(KINDS[kind]), prefix=PYTEST_PREFIX)


@pytest.mark.parametrize("name, extra, says", UNUSABLE_KUBECONFIGS, ids=lambda v: Path(str(v)).stem if v else None)
def test_a_well_formed_but_unusable_kubeconfig_fails_pytest_in_one_line(name, extra, says):
    path = MALFORMED / "kubeconfig" / name
    out = pytest_process(["--cluster=existing", f"--kubeconfig={path}", *extra])
    assert_one_line(out, path, says, prefix=PYTEST_PREFIX)


@pytest.mark.parametrize("args, env", [
    pytest.param([f"--expected-hardware={KINDS['hardware'].good}", "--cluster=existing", f"--kubeconfig={UNREACHABLE}"], None,
                 id="hardware"),
    pytest.param(["--cluster=existing", f"--kubeconfig={UNREACHABLE}"], None, id="kubeconfig"),
    pytest.param(["--cluster=existing"], {"KUBECONFIG": str(UNREACHABLE)}, id="kubeconfig-from-environment"),
])
def test_a_well_formed_file_passes_the_pytest_input_check(args, env):
    line = assert_one_line(pytest_process(args, env), SERVER, "unreachable", prefix=PYTEST_PREFIX)
    assert "file" not in line and "kubeconfig" not in line


def test_a_report_dir_that_is_a_file_fails_pytest_in_one_line(tmp_path):
    afile = tmp_path / "a-file"
    afile.write_text("")
    assert_one_line(pytest_process([f"--report-dir={afile}"]), afile, "is a file, not a directory", prefix=PYTEST_PREFIX)


def test_a_run_id_whose_cluster_belongs_to_a_live_run_fails_pytest_in_one_line_and_leaves_that_cluster():
    """A second run given a running run's id would reuse its embedded cluster, then tear it down under it."""
    from dra_harness import providers
    from dra_harness.providers.embedded.cluster import ClusterSpec, LocalCluster
    from dra_harness.providers.localstate import ClusterState

    run_id = f"taken-{os.urandom(3).hex()}"
    cluster = LocalCluster(f"run-{run_id}")
    owner = subprocess.Popen(["sleep", "120"])  # not this process, nor one it descends from
    try:
        cluster.state_dir.mkdir(parents=True)
        cluster._save(ClusterState(spec=ClusterSpec(name=cluster.name, owner_pid=owner.pid), ports={}, binaries={}))
        assert_one_line(pytest_process([f"--run-id={run_id}"]), run_id, f"belongs to a run still going (pid {owner.pid})",
                        prefix=PYTEST_PREFIX)
        assert cluster.state() is not None, "the refused run removed the other run's cluster"
        # Controls: the run that owns it (here: one this process descends from) and a run whose owner is gone pass.
        cluster._save(ClusterState(spec=ClusterSpec(name=cluster.name, owner_pid=os.getppid()), ports={}, binaries={}))
        providers.create(RunConfig(), run_id).check_inputs()
        owner.kill()
        owner.wait()
        cluster._save(ClusterState(spec=ClusterSpec(name=cluster.name, owner_pid=owner.pid), ports={}, binaries={}))
        providers.create(RunConfig(), run_id).check_inputs()
    finally:
        owner.kill()
        owner.wait()
        cluster.down()  # not only its directory: were the check gone, the run would have started a cluster there
