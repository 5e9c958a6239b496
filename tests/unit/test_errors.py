"""One error hierarchy: every exception the harness defines is a HarnessError, and only those end in one line.

The CLI and the plugin print a :class:`HarnessError` as one line; anything else is a bug
and must keep its traceback. So a new exception class that forgets the base would turn
an expected failure into a "bug" report, and one that derives from ``ValueError`` (as
most did) would let a real bug pass as a tidy one-liner: both are caught here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest
from click.testing import CliRunner

import dra_harness
from dra_harness import errors, providers
from dra_harness.cli import app
from dra_harness.errors import BuildError, CheckError, ClusterError, HarnessError, InputError, KubeApiError, NotEstablished, Refused
from dra_harness.plugin import inputs, pytest_plugin
from dra_harness.options import RunConfig
from dra_harness.plugin.stash import RUN_CONFIG

#: Exception classes under src/dra_harness that are not HarnessErrors, each with the reason: an entry
#: here must be a class that is raised for something other than an expected failure.
NOT_HARNESS_ERRORS: dict[str, str] = {
    "dra_harness.retrying.NotYet": "control flow inside one retry loop: the caller turns the last one into its own error",
}

#: The bases a module's own exception class derives from (errors.py itself defines them and LockTimeout).
BASES = (InputError, ClusterError, BuildError, KubeApiError, Refused, CheckError, NotEstablished)


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined at the top level of a module of the package, by dotted name."""
    found = {}
    for info in pkgutil.walk_packages(dra_harness.__path__, "dra_harness."):
        if info.name.endswith(".__main__"):  # runs the CLI when imported
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


CLASSES = _exception_classes()


def test_the_package_defines_the_exception_classes_the_walk_should_find():
    # The walk itself works: it finds classes in deep modules, not only errors.py.
    assert {"dra_harness.errors.HarnessError", "dra_harness.kube.rest.NotFound", "dra_harness.kube.waits.WaitTimeout",
            "dra_harness.checks.disruption.DisruptionRefused", "dra_harness.providers.kind.tools.KindError"} <= set(CLASSES)
    assert len(CLASSES) >= 30


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_exception_class_of_the_harness_is_a_harness_error(name: str):
    cls = CLASSES[name]
    if name in NOT_HARNESS_ERRORS:
        assert not issubclass(cls, HarnessError), f"{name} is a HarnessError now: drop it from NOT_HARNESS_ERRORS"
        return
    assert issubclass(cls, HarnessError), f"{name} derives from {[b.__name__ for b in cls.__mro__[1:]]}, not HarnessError"
    if cls.__module__ != errors.__name__:
        assert issubclass(cls, BASES), f"{name}: derive it from one of {[b.__name__ for b in BASES]}, not HarnessError itself"


def test_the_allow_list_names_only_classes_that_exist():
    assert set(NOT_HARNESS_ERRORS) <= set(CLASSES)
    assert all(reason.strip() for reason in NOT_HARNESS_ERRORS.values())


def test_no_two_exception_classes_share_a_name():
    by_name: dict[str, list[str]] = {}
    for dotted, cls in CLASSES.items():
        by_name.setdefault(cls.__name__, []).append(dotted)
    assert {n: d for n, d in by_name.items() if len(d) > 1} == {}


def test_no_harness_error_is_also_a_builtin_value_or_lookup_error():
    # Otherwise an `except ValueError` written for a bug (a bad int()) would swallow it, and back again.
    mixed = [n for n, c in CLASSES.items() if issubclass(c, (ValueError, LookupError, RuntimeError))]
    assert mixed == []


def test_a_wait_that_timed_out_is_a_harness_error_and_still_a_failed_check():
    from dra_harness.kube.waits import WaitTimeout

    e = WaitTimeout("pod x to run", 5, None, why="pending: 0/4 nodes available")
    assert isinstance(e, CheckError) and isinstance(e, AssertionError)  # pytest reports it as a failed check


# -- the CLI ------------------------------------------------------------------------------
def _failing_command(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> list[str]:
    """``cluster env`` made to raise ``error``; returns the arguments that run it."""
    command = app.main.commands["cluster"].commands["env"]  # type: ignore[attr-defined]

    def fail(**kwargs: object) -> None:
        raise error

    monkeypatch.setattr(command, "callback", fail)
    return ["cluster", "env"]


@pytest.mark.parametrize("error", [
    InputError("--expected-hardware hw.yaml: nodes.n1.devices: 'many' is not of type 'integer'"),
    KubeApiError("no answer from https://127.0.0.1:6443"),
    Refused("refusing to disrupt n1: it is not labelled"),
    CheckError("timed out after 5s waiting for pod x to run\nlast seen: Pending"),
], ids=lambda e: type(e).__name__)
def test_a_harness_error_is_one_line_and_exit_2(monkeypatch, error):
    result = CliRunner().invoke(app.main, _failing_command(monkeypatch, error))
    assert result.exit_code == 2
    first = str(error).splitlines()[0]
    assert result.stderr == f"error: {first}\n"
    assert result.stdout == ""


def test_a_build_or_start_up_failure_adds_the_tail_of_its_log(monkeypatch):
    result = CliRunner().invoke(app.main, _failing_command(monkeypatch, ClusterError("kube-apiserver exited\nE0101 bind: address in use")))
    assert result.exit_code == 2
    assert result.stderr == "error: kube-apiserver exited\nE0101 bind: address in use\n"


@pytest.mark.parametrize("error", [KeyError("spec"), ValueError("invalid literal for int()"), RuntimeError("oops")],
                         ids=lambda e: type(e).__name__)
def test_negative_control_any_other_exception_is_a_bug_with_its_traceback(monkeypatch, error):
    # KeyError and ValueError were once printed as tidy one-liners: a bug hidden as bad input.
    result = CliRunner().invoke(app.main, _failing_command(monkeypatch, error))
    assert result.exit_code == app.BUG_EXIT != 2
    lines = result.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert f"{type(error).__name__}: " in result.stderr
    assert lines[-1] == app.BUG_HINT
    assert not any(line.startswith("error:") for line in lines)


def test_a_real_harness_error_from_a_command_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("DRA_HARNESS_STATE", str(tmp_path))
    result = CliRunner().invoke(app.main, ["cluster", "kubeconfig", "--name", "no-such-cluster"])
    assert (result.exit_code, result.stderr) == (2, "error: cluster 'no-such-cluster' is not up\n")


def test_usage_errors_and_help_are_still_clicks(monkeypatch):
    result = CliRunner().invoke(app.main, ["cluster", "up", "--nodes", "0"])
    assert result.exit_code == 2 and "Traceback" not in result.stderr and app.BUG_HINT not in result.stderr
    assert CliRunner().invoke(app.main, ["--version"]).exit_code == 0


# -- the plugin -----------------------------------------------------------------------------
def _config(**options: object) -> types.SimpleNamespace:
    """What ``_check_inputs`` reads of a pytest config: the run's provider and --report-dir."""
    config = RunConfig.of({"cluster": "existing", **options})
    provider = providers.create(config, "errors-test")
    return types.SimpleNamespace(stash={pytest_plugin.PROVIDER: provider, RUN_CONFIG: config}, getoption=lambda name: None)


def test_the_plugin_turns_an_input_error_into_one_usage_line(tmp_path):
    bad = tmp_path / "kubeconfig"
    bad.write_text("this: [is not a kubeconfig\n")
    with pytest.raises(pytest.UsageError) as e:
        pytest_plugin._check_inputs(_config(kubeconfig=str(bad)))
    assert len(str(e.value).splitlines()) == 1 and str(bad) in str(e.value)


def test_negative_control_the_plugin_lets_a_bug_in_the_input_checks_through(monkeypatch):
    def broken(*args: object) -> None:
        raise KeyError("provider")

    monkeypatch.setattr(inputs, "check", broken)
    with pytest.raises(KeyError):
        pytest_plugin._check_inputs(_config(kubeconfig="/nonexistent"))


def test_what_the_input_checks_raise_is_what_the_plugin_turns_into_one_line():
    from dra_harness.kube.client import KubeconfigError
    from dra_harness.kube.rest import ApiError, Unreachable
    from dra_harness.providers.hardware import HardwareFileError
    from dra_harness.providers.profiles import ProfileError

    for cls in (InputError, HardwareFileError, KubeconfigError, ProfileError, Unreachable, ApiError):
        assert issubclass(cls, inputs.ERRORS), cls
    assert not issubclass(KeyError, inputs.ERRORS) and not issubclass(ValueError, inputs.ERRORS)


@pytest.mark.parametrize(("options", "says"), [
    ({"kwok_node_selector": "real-node-0", "kwok_image": "kwok:1"}, "--kwok-node-selector 'real-node-0': expected KEY=VALUE"),
    ({"kwok_node_selector": "kubernetes.io/hostname=real-node-0"}, "--kwok-node-selector: only with --kwok-image"),
])
def test_a_kwok_node_selector_that_cannot_place_the_pod_is_one_line(options, says, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    with pytest.raises(pytest.UsageError) as e:
        pytest_plugin._check_inputs(_config(kubeconfig=str(kubeconfig), **options))
    assert str(e.value).startswith(says) and len(str(e.value).splitlines()) == 1, str(e.value)
