"""The harness's pytest plugin: which cluster, one handle to it, one namespace per test.

``--cluster=local`` (default) brings an embedded cluster up the first time a test asks
for it, once per run even under pytest-xdist: workers agree through a file lock on the
run id, and the process that owns the run (the xdist controller, or the only process)
removes it at exit; a watchdog removes it if that process is killed. ``existing``
targets a kubeconfig and never touches what the run did not create: every object the
harness makes carries the run label, and the session ends by deleting exactly those.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest

from dra_harness.report import evidence as evidence_mod
from dra_harness import lifetime
from dra_harness.report import allocations, failure_evidence, results, rundir
from dra_harness.plugin import concerns, inputs
from dra_harness.plugin import needs_gate as gate
from dra_harness.plugin import run_watchdog
from dra_harness.plugin.scheduler_timings import SchedulerTimings
from dra_harness import providers
from dra_harness.providers.base import Provider
from dra_harness.providers.handle import ClusterHandle
from dra_harness.providers import dead_runs
from dra_harness.providers.sweep import sweep_run
from dra_harness.providers.lock import AWAY_SECONDS, ClusterLock
from dra_harness.checks.disruption import Disruptor
from dra_harness.report.evidence import Evidence
from dra_harness.kube import policy, rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import wait_for_object
from dra_harness.options import OPTIONS, RunConfig, cluster_rules
from dra_harness.plugin.stash import RUN_CONFIG, run_config
from dra_harness.labels import CORDONED_BY_ANNOTATION, DISRUPTABLE_LABEL, KEPT_LABEL, RUN_LABEL, TEST_LABEL
from dra_harness.host import runtime_dirs
from dra_harness.errors import HarnessError, KubeApiError, LockLost, NotEstablished, one_line

#: The preflight's fixture and the ``requires`` gate, and the progress lines for a CI log, live beside
#: this module (one concept each).
pytest_plugins = ["dra_harness.plugin.needs_gate", "dra_harness.plugin.session_heartbeat"]

_OWNER_ENV = "DRA_HARNESS_RUN_OWNER"
#: The run's private lock directory (mkdtemp, 0700), handed to xdist workers through the environment.
_LOCK_DIR_ENV = "DRA_HARNESS_LOCK_DIR"
_WATCHDOG = pytest.StashKey[subprocess.Popen]()
#: The run's provider, made from its options in every process of the run.
PROVIDER = pytest.StashKey[Provider]()
RUN_ID = pytest.StashKey[str]()
#: Set once the run's inputs passed their checks: only then may the end of the run clean anything up.
INPUTS_OK = pytest.StashKey[bool]()

log = logging.getLogger(__name__)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dra-harness")
    for o in OPTIONS:  # the one table the CLI uses too
        if o.is_flag:
            group.addoption(o.flag, action="store_true", help=o.help)
        elif o.multiple:
            group.addoption(o.flag, action="append", default=[], metavar=o.metavar, help=o.help)
        else:
            group.addoption(o.flag, default=o.default, type=o.type, choices=o.choices, metavar=o.metavar, help=o.help)


def _run_id(config: pytest.Config) -> str:
    return config.stash[RUN_ID]


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        run_id = workerinput["testrunuid"]
    else:
        run_id = config.getoption("--run-id") or uuid.uuid4().hex[:12]
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?", run_id):
            raise pytest.UsageError(f"--run-id {run_id!r} must be a lowercase DNS label of at most 32 characters")
        if hasattr(config.option, "testrunuid"):
            # xdist hands its run uid to every worker; make it ours.
            config.option.testrunuid = run_id
        os.environ[_OWNER_ENV] = str(os.getpid())
        # Never a predictable path under /tmp: root would follow a planted symlink.
        os.environ[_LOCK_DIR_ENV] = tempfile.mkdtemp(prefix=f"dra-harness-{run_id}-")
        lifetime.terminate_as_interrupt()  # CI's SIGTERM runs teardown and the sweep, like Ctrl-C
    config.stash[RUN_ID] = run_id
    config.stash[RUN_CONFIG] = RunConfig.of({o.dest: config.getoption(o.flag) for o in OPTIONS})
    config.stash[PROVIDER] = providers.create(config.stash[RUN_CONFIG], run_id)
    concerns.register(config)
    config.addinivalue_line("markers", "exclusive: needs every device free; runs while no other test holds devices")
    config.addinivalue_line("markers", f"disruptive: restarts drivers, drains or taints nodes labelled {DISRUPTABLE_LABEL}=true (runs alone)")
    config.addinivalue_line("markers", "simulated_devices: runs only where the contention nodes are simulated")
    config.addinivalue_line("markers", "requires(*needs): what the check needs of the cluster (dra_harness.checks.needs); "
                                       "not established at once, with the preflight's fact, when it is missing")
    report_dir = run_config(config).report_dir
    if workerinput is None and report_dir:
        config.pluginmanager.register(_EvidenceWriter(Path(report_dir)), "dra-harness-evidence")
        fp = Path(report_dir) / "fingerprint.json"
        if fp.is_file():  # written by `dra-harness run`, with the cluster already up
            config.pluginmanager.register(SchedulerTimings(config.stash[PROVIDER], fp), "dra-harness-scheduler-timings")
    if workerinput is None:
        _check_inputs(config)
        _start_watchdog(config, run_id)
        _sweep_dead_runs(config, run_id)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    concerns.tag(items)


def _start_watchdog(config: pytest.Config, run_id: str) -> None:
    """If this process is killed outright, sweep what the run made on a cluster that outlives it."""
    target = config.stash[PROVIDER].watchdog_target()
    kubeconfig, context = target or (None, None)
    opt = run_config(config)
    config.stash[_WATCHDOG] = run_watchdog.start(os.getpid(), run_id, Path(os.environ[_LOCK_DIR_ENV]), target is not None,
                                                 kubeconfig, context, opt.lease_namespace, opt.report_dir, opt.lease_seconds)


def _sweep_dead_runs(config: pytest.Config, run_id: str) -> None:
    """On a cluster that outlives runs, remove what dead runs left there (:mod:`dra_harness.providers.dead_runs`)."""
    provider = config.stash[PROVIDER]
    if provider.watchdog_target() is None:
        return  # the run's own cluster: nothing of another run is on it
    try:
        kube = provider.connect()
    except HarnessError as e:
        sys.stderr.write(f"dra-harness: could not look for what dead runs left: {one_line(e)}\n")
        return
    dead_runs.sweep(kube, run_config(config).lease_namespace, _say, spare=frozenset({run_id}))


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")


def _check_inputs(config: pytest.Config) -> None:
    """Reject bad input before any test runs, in one line (pytest prints UsageError without a traceback)."""
    report_dir = run_config(config).report_dir
    try:
        inputs.check(config.stash[PROVIDER], report_dir)
        if report_dir:
            # Run directly, the session marks its --report-dir (`dra-harness run` has claimed it already): the marker is
            # what lets `dra-harness report DIR` render it, which refuses a directory no run marked.
            rundir.mark(Path(report_dir), _run_id(config))
    except inputs.ERRORS as e:
        raise pytest.UsageError(one_line(e)) from None
    except OSError as e:
        raise pytest.UsageError(f"--report-dir {report_dir}: cannot mark it as this run's: {e.strerror or e}") from None
    config.stash[INPUTS_OK] = True


def _lock_path(run_id: str, kind: str) -> Path:
    """A lock file the processes of one run share (xdist workers on this machine), in the run's private directory."""
    return Path(os.environ[_LOCK_DIR_ENV]) / f"{run_id}.{kind}.lock"


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo) -> None:
    lifetime.stopping.set()  # teardown must not wait out deadlines on a cluster that may be going away


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if lifetime.stopping.is_set():  # told to stop, though something swallowed the interrupt: no further test
        raise KeyboardInterrupt("the run was told to stop")


@contextmanager
def _locked(run_id: str, kind: str, operation: int) -> Iterator[None]:
    with os.fdopen(runtime_dirs.open_private_file(_lock_path(run_id, kind)), "r+") as f:
        fcntl.flock(f, operation)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is not None or RUN_ID not in config.stash:
        return
    clean = False
    try:
        with lifetime.cleaning_up():
            clean = _clean_up(config)
    finally:
        watchdog = config.stash.get(_WATCHDOG, None)
        if watchdog is None or clean:  # our own cleanup is done: nothing is left for it
            shutil.rmtree(os.environ.get(_LOCK_DIR_ENV, ""), ignore_errors=True)
        if watchdog is not None and clean:
            _ended_clean(config, watchdog)
        elif watchdog is not None:
            # An API server away longer than our sweep's deadline: the watchdog sweeps once more when we are gone.
            sys.stderr.write(f"dra-harness: its watchdog (pid {watchdog.pid}) sweeps run {_run_id(config)} again once "
                             "this process has ended\n")


def _ended_clean(config: pytest.Config, watchdog: subprocess.Popen) -> None:
    """Stop the watchdog of a run that swept itself clean; on a cluster that outlives it, delete its Lease too."""
    provider = config.stash[PROVIDER]
    try:
        kube = provider.connect() if provider.watchdog_target() is not None else None
    except HarnessError:  # gone since the sweep: its Lease expires unrenewed, a later sweep of dead runs deletes it
        kube = None
    if kube is None:
        watchdog.kill()
        watchdog.wait()
        if not run_config(config).report_dir:
            shutil.rmtree(run_watchdog.log_path(_run_id(config), None).parent, ignore_errors=True)
        return
    run_watchdog.ended_clean(watchdog, kube, _run_id(config), run_config(config).lease_namespace, run_config(config).report_dir)


def _clean_up(config: pytest.Config) -> bool:
    """Take the run off its cluster; whether nothing of it is left."""
    provider = config.stash[PROVIDER]
    if not config.stash.get(INPUTS_OK, False):
        return True  # bad input: nothing was started or created
    if provider.outlives_run:
        return _sweep(config)
    provider.close()  # the run's own cluster, and everything in it
    return True


def _sweep(config: pytest.Config) -> bool:
    """Delete what this run created on a cluster that outlives it; whether nothing is left."""
    try:
        kube = config.stash[PROVIDER].connect()
        left = sweep_run(kube, _run_id(config), lease_namespace=run_config(config).lease_namespace)
    except HarnessError as e:  # a kubeconfig gone bad, an API server gone, a cluster gone: say so, one line
        sys.stderr.write(f"dra-harness: could not clean up run {_run_id(config)}: {e}\n")
        return False
    if left:
        sys.stderr.write(f"dra-harness: objects of run {_run_id(config)} still present after cleanup: {', '.join(left)}\n")
    return not left


@pytest.fixture(scope="session")
def run_id(request: pytest.FixtureRequest) -> str:
    return _run_id(request.config)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, run_id: str) -> ClusterHandle:
    """The cluster under test, with typed access and the provider's actions.

    What the run holds as the cluster's facts for its whole length (the hardware observed when the handle opens,
    the preflight's) is read under a shared lock, the run's and other runs' (a Lease), never in the middle of an
    exclusive section: another run's drain would otherwise be this run's cordoned node and missing slices."""
    opt = run_config(request.config)
    provider = request.config.stash[PROVIDER]
    lock = _run_lock(request.config, provider, run_id)
    with _device_lock(run_id, exclusive=False), lock.shared() if lock is not None else nullcontext():
        # One process of the run creates the cluster (where the provider creates one); the others reuse it.
        with _locked(run_id, "cluster", fcntl.LOCK_EX):
            handle = provider.open(owner_pid=int(os.environ.get(_OWNER_ENV, os.getpid())))
        handle.shell_image = opt.shell_image
        handle.kube.device_drivers = frozenset({handle.driver})  # a pod wait judges refusals on its nodes
        handle.kube.cordoned_before = frozenset(  # read under the shared Lease: no other run's drain is under way
            n["metadata"]["name"] for n in handle.kube.list(rest.NODES) if n["spec"].get("unschedulable")
            and CORDONED_BY_ANNOTATION not in (n["metadata"].get("annotations") or {}))
        handle.kube.rules = cluster_rules(opt)  # everything the run creates follows the cluster's rules
        if opt.driver_daemonset:
            namespace, _, name = opt.driver_daemonset.partition("/")
            handle.profile = dataclasses.replace(handle.profile, driver_daemonset=(namespace, name))
        facts = gate.preflight_facts(request.config, handle, _lock_path(_run_id(request.config), "preflight"))
    if facts.driver_daemonset and not opt.driver_daemonset and handle.driver_pods() is None:
        # The profile's name is a hint; the DaemonSet found serving the driver is what its pods are.
        namespace, _, name = facts.driver_daemonset.partition("/")
        handle.profile = dataclasses.replace(handle.profile, driver_daemonset=(namespace, name))
    handle.avoid = {**{n.name: f"unschedulable: {', '.join(n.taints) or 'cordoned'}" for n in facts.nodes.values()
                       if not n.simulated and n.published and not n.schedulable},
                    **{n.name: n.image_evidence for n in facts.container_nodes() if n.image == "unusable"}}
    return handle


_PHASES = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if call.excinfo is not None:
        refused = policy.policy_refusal(call.excinfo.value) or _api_away(call.excinfo.value)
        if call.excinfo.errisinstance((NotEstablished, LockLost)) or refused:
            # The harness could not test: reported as a skip whose reason the report reads as "not established".
            # A lost lease too: the cluster was not the run's alone (an API server away longer than the lease, a
            # takeover), so what the test saw may be another run's doing, not the product's.
            path, line, _ = item.reportinfo()
            report.outcome = "skipped"
            why = refused or one_line(call.excinfo.value)
            report.longrepr = (str(path), (line or 0) + 1, f"Skipped: {results.as_not_established(why)}")
    item.stash.setdefault(_PHASES, {})[report.when] = report
    return report


def _api_away(error: BaseException) -> str | None:
    """Why a request that ended a test never reached a verdict: the API server did not answer, or turned it away as
    too busy (429). Not a 5xx: a webhook of the driver's that fails is answered 500, and that is the product's."""
    if isinstance(error, rest.Unreachable) or (isinstance(error, rest.ApiError) and error.status == 429):
        return f"the API server did not take the test's request: {one_line(error)}"
    return None


def _failed(item: pytest.Item) -> bool:
    return any(r.failed for r in item.stash.get(_PHASES, {}).values())


@contextmanager
def _device_lock(run_id: str, exclusive: bool) -> Iterator[None]:
    """Tests share the cluster's devices; an ``exclusive`` test waits until it is alone."""
    with _locked(run_id, "devices", fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH):
        yield


def _exclusive(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) for m in ("exclusive", "disruptive"))


_RUN_LOCK = pytest.StashKey[ClusterLock | None]()


def _run_lock(config: pytest.Config, provider: Provider, run_id: str) -> ClusterLock | None:
    """The lock other runs on the same cluster see (made once per process); None on the run's own cluster, and
    while a named cluster this run brings up is not up yet (no other run's section can be on it then)."""
    if _RUN_LOCK not in config.stash:
        if not provider.outlives_run:
            config.stash[_RUN_LOCK] = None
        elif (kube := provider.kube_before_run()) is not None:
            opt = run_config(config)
            config.stash[_RUN_LOCK] = ClusterLock(kube, run_id, opt.lease_namespace, lease_s=opt.lease_seconds)
        else:
            return None
    return config.stash[_RUN_LOCK]


@pytest.fixture(scope="session")
def cluster_lock(request: pytest.FixtureRequest, cluster: ClusterHandle, run_id: str) -> Iterator[ClusterLock | None]:
    """The lock other runs on the same cluster see (the one the cluster was opened under); None on the run's own."""
    lock = _run_lock(request.config, request.config.stash[PROVIDER], run_id)
    try:
        yield lock
    finally:
        if lock is not None:
            lock.close()


@pytest.fixture(autouse=True)
def _cluster_lock(request: pytest.FixtureRequest, run_id: str) -> Iterator[None]:
    """Every test that uses the cluster holds the run's lock: shared, or alone when it disrupts.

    Held for the whole test, so a disruptive test never overlaps a test that reads
    the state it disturbs (drivers, slices, cordons), even under pytest-xdist, nor a
    test of another run on the same cluster (the Leases of :mod:`dra_harness.providers.lock`).
    """
    if "cluster" not in request.fixturenames:
        yield
        return
    exclusive = _exclusive(request.node)
    shared_lock: ClusterLock | None = request.getfixturevalue("cluster_lock")
    with _device_lock(run_id, exclusive):
        if shared_lock is None:
            yield
            return
        request.node.stash[_SECTION_LOCK] = shared_lock
        try:
            with shared_lock.exclusive() if exclusive else shared_lock.shared():
                yield
        except LockLost:
            if not request.node.stash.get(_LOST_REPORTED, False):
                raise  # lost after the test's body ended: its teardown fails with the reason
        finally:
            del request.node.stash[_SECTION_LOCK]


#: How long a test's teardown asks again for its namespace's deletion while the API server is away or busy.
NAMESPACE_DELETE_S = 30.0
_LEFT_NAMESPACES = pytest.StashKey[list[str]]()
_SECTION_LOCK = pytest.StashKey[ClusterLock]()
_LOST_REPORTED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A test whose lease on a shared cluster was lost while it ran ends with :class:`LockLost` (not established, see
    makereport), even if its body passed: another run may have disrupted it, or it another run. A disruptive test is
    stopped earlier, at its disruptor's next step (the disruptor's guard), and its ``restoring()`` runs on the way out."""
    lock = item.stash.get(_SECTION_LOCK, None)
    try:
        result = yield
        if lock is not None:
            lock.ensure_held()
    except LockLost:
        item.stash[_LOST_REPORTED] = True  # reported here: the section's end need not report it again
        raise
    return result


@pytest.fixture
def namespace(request: pytest.FixtureRequest, cluster: ClusterHandle, run_id: str) -> Iterator[str]:
    """A fresh namespace labelled with the run and test, deleted at teardown.

    A failed test's namespace is saved as evidence first (and kept with
    ``--keep-on-failure``). An ``exclusive`` or ``disruptive`` test starts only when the
    namespaces of earlier tests are gone, so every device is free.
    """
    kube = cluster.kube
    slug = results.slug(request.node.nodeid)
    exclusive = _exclusive(request.node)
    _delete_left_namespaces(request.config, cluster)
    if exclusive:
        cluster.wait_until_quiet()
    name = f"dra-{slug}-{uuid.uuid4().hex[:5]}"[:63]
    cluster.create_namespace(name, {RUN_LABEL: run_id, TEST_LABEL: slug})
    keep = False
    try:
        # The ServiceAccount admission plugin rejects pods until the default SA exists.
        wait_for_object(kube, rest.SERVICE_ACCOUNTS, "default", lambda o: True, 30,
                        f"default ServiceAccount in {name}", namespace=name)
        yield name
    finally:
        report_dir = run_config(request.config).report_dir
        _record_allocations(kube, name, report_dir, request.node.nodeid)
        if _failed(request.node):
            try:
                failure_evidence.save(failure_evidence.collect(kube, name, cluster.driver, cluster.driver_log),
                                      Path(report_dir) if report_dir else None, slug)
            except KubeApiError as e:  # evidence, never a verdict of its own
                log.warning("evidence of %s not saved: %s", name, one_line(e))
            keep = run_config(request.config).keep_on_failure
        if keep:
            kube.patch(rest.NAMESPACES, name, {"metadata": {"labels": {KEPT_LABEL: "true"}}})
        else:
            try:
                # Throttled (429) or the API server away for a while: asked again, since the next exclusive test waits
                # for this one's devices; then the test's verdict stands and the end-of-run sweep, which retries,
                # takes the namespace (it carries the run label).
                rest.answered(lambda: cluster.delete_namespace(name), NAMESPACE_DELETE_S)
            except (rest.ApiError, rest.Unreachable) as e:
                if not rest.transient(e):
                    raise
                log.warning("namespace %s left to the end-of-run sweep: %s", name, one_line(e))
                request.config.stash.setdefault(_LEFT_NAMESPACES, []).append(name)
        if exclusive:
            cluster.wait_until_quiet()


def _delete_left_namespaces(config: pytest.Config, cluster: ClusterHandle) -> None:
    """Delete the namespaces earlier teardowns left to the sweep (the API server was away or busy then): their
    pods hold devices this test may need, and an exclusive test waits until no claim holds one."""
    left = config.stash.get(_LEFT_NAMESPACES, [])
    for name in list(left):
        try:
            rest.answered(lambda: cluster.delete_namespace(name), AWAY_SECONDS)  # noqa: B023 - called at once
        except rest.NotFound:
            pass
        except (rest.ApiError, rest.Unreachable) as e:
            if not rest.transient(e):
                raise
            log.warning("namespace %s still left to the end-of-run sweep: %s", name, one_line(e))
            continue
        left.remove(name)


def _record_allocations(kube: Kube, namespace: str, report_dir: str | None, test: str) -> None:
    """Which claim each pod of the test held, for the report's allocation table; never fails the test."""
    if not report_dir:
        return
    try:
        allocations.append(Path(report_dir), test, allocations.collect(kube, namespace))
    except (KubeApiError, OSError) as e:
        log.warning("allocations of %s not recorded: %s", namespace, e)


@pytest.fixture
def disruptor(request: pytest.FixtureRequest, cluster: ClusterHandle) -> Iterator[Disruptor]:
    """Provider actions for a ``disruptive`` test, within the safety rules of :mod:`dra_harness.checks.disruption`."""
    if request.node.get_closest_marker("disruptive") is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses disruptor but is not marked disruptive")
    if not cluster.provider.harness_operated and not run_config(request.config).allow_disruptive:
        pytest.skip(f"disruptive: pass --allow-disruptive to let it touch nodes labelled {DISRUPTABLE_LABEL}=true")
    if run_config(request.config).dry_run:
        nodes = [n["metadata"]["name"] for n in cluster.kube.list(rest.NODES, label_selector=f"{DISRUPTABLE_LABEL}=true")]
        pytest.skip(f"dry run: would disrupt one of {', '.join(nodes) or 'no node (none is labelled)'}")
    lock: ClusterLock | None = request.getfixturevalue("cluster_lock")
    yield Disruptor(cluster, allowed=True, guard=lock.ensure_held if lock is not None else None)


@pytest.fixture(scope="session")
def tenant_label(request: pytest.FixtureRequest) -> str:
    """The pod label that names a tenant (``--tenant-label``)."""
    return run_config(request.config).tenant_label


@pytest.fixture
def evidence(request: pytest.FixtureRequest) -> Evidence:
    """Record facts (device, node, timings) that the report shows next to the verdict."""
    return Evidence.for_item(request.node)


class _EvidenceWriter:
    """Registered on the controller only, which sees every worker's reports."""

    def __init__(self, report_dir: Path) -> None:
        self.report_dir = report_dir

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        evidence_mod.write(self.report_dir, report)
