"""Inventory: the driver publishes, for every GPU node, exactly the hardware it should.

A missing or stale ResourceSlice is the most common reason a DRA pod stays Pending,
and it looks just like a full cluster. These checks compare the slices with the
expected hardware (``--expected-hardware``, or what the embedded cluster started)
before any allocation test can be misread. On an existing cluster without
``--expected-hardware`` the baseline is what the cluster published at the start, so
the checks that compare with it record that (``expected_source``) and the report
shows them as not established rather than passed.
"""

from __future__ import annotations

import pytest

from dra_harness.errors import NotEstablished
from dra_harness.checks import cel
from dra_harness.checks.inventory import audit
from dra_harness.providers.hardware import devices_by_node
from dra_harness.kube import rest

pytestmark = pytest.mark.concern("inventory", "Inventory")


@pytest.fixture
def slices(cluster):
    return cluster.kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={cluster.driver}")


@pytest.fixture
def findings(cluster, slices):
    nodes = {n["metadata"]["name"] for n in cluster.kube.list(rest.NODES)}
    return audit(slices, cluster.expected, node_names=nodes)


@pytest.fixture
def baseline(cluster, evidence):
    """The expected hardware, with where it came from recorded as evidence for the report."""
    evidence.record(expected_source=cluster.expected_source)
    return cluster.expected


def _report(findings, kinds):
    relevant = [f for f in findings if f.kind in kinds]
    return "\n".join(f"- {f.message}" for f in relevant)


def test_every_gpu_node_publishes_resource_slices(cluster, baseline, findings):
    missing = _report(findings, {"missing-slice"})
    assert not missing, f"nodes without ResourceSlices for {cluster.driver}:\n{missing}"


def test_device_counts_match_the_expected_hardware(cluster, baseline, slices, findings):
    problems = _report(findings, {"missing-slice", "device-count", "unexpected-node"})
    published = sum(len(d) for d in devices_by_node(slices, cluster.driver).values())
    assert not problems, (
        f"{published} devices published, {baseline.total_devices} expected:\n{problems}"
    )


def test_device_attributes_and_capacity_match_the_expected_hardware(baseline, findings):
    problems = _report(findings, {"attribute", "capacity"})
    assert not problems, f"devices that differ from the expected hardware:\n{problems}"


def test_no_device_or_pool_is_published_twice(findings):
    problems = _report(findings, {"duplicate-device", "duplicate-pool", "duplicate-uuid"})
    assert not problems, f"duplicated devices or pools:\n{problems}"


def test_pools_are_complete_and_no_slice_is_stale(findings):
    problems = _report(findings, {"incomplete-pool", "stale-slice"})
    assert not problems, f"incomplete pools or stale slices:\n{problems}"


def _published_everywhere(cluster) -> dict[tuple[str, str, str], dict]:
    """(driver, pool, device) -> device, for every device any driver publishes."""
    out = {}
    for s in cluster.kube.list(rest.RESOURCE_SLICES):
        for d in s["spec"].get("devices") or []:
            out[(s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])] = d
    return out


def _names(names: list[str], limit: int = 10) -> str:
    return ", ".join(names[:limit]) + (f" ... ({len(names) - limit} more)" if len(names) > limit else "")


def _unpublished_references(expressions: list[str], everything: dict) -> list[str]:
    """Attributes and capacities the selectors read that no device publishes (the likely typo)."""
    published = set()
    for (driver, _, _), device in everything.items():
        for kind in ("attributes", "capacity"):
            for name in device.get(kind) or {}:
                domain, _, short = name.rpartition("/")
                published.add((kind, domain or driver, short))
    return sorted({f"{domain}/{name}" for e in expressions for kind, domain, name in cel.references(e)
                   if (kind, domain, name) not in published})


def test_the_device_class_selects_exactly_the_drivers_devices(cluster, evidence):
    """The class's CEL selectors, evaluated (cel-python, as the scheduler would) against every
    device any driver publishes, select all of the driver's devices and no other: a typo'd
    selector that matches nothing, one that matches a subset, or one that also takes another
    driver's devices all fail, naming the devices and the selector."""
    device_class = cluster.kube.get(rest.DEVICE_CLASSES, cluster.device_class)
    expressions = [s["cel"]["expression"] for s in device_class["spec"].get("selectors") or [] if "cel" in s]
    everything = _published_everywhere(cluster)
    errors: dict[str, str] = {}

    def selected(key: tuple[str, str, str], device: dict) -> bool:
        for expression in expressions:  # a class's selectors must all match
            outcome = cel.evaluate(expression, key[0], device)
            if not outcome.matched:
                if outcome.error:
                    errors.setdefault(expression, outcome.error)
                return False
        return True

    chosen = sorted(k for k, d in everything.items() if selected(k, d))
    drivers = sorted(k for k in everything if k[0] == cluster.driver)
    evidence.record(device_class=cluster.device_class, selectors=expressions, selected=len(chosen),
                    driver_devices=len(drivers))
    assert drivers, f"{cluster.driver} publishes no devices: DeviceClass {cluster.device_class} has nothing to select"
    missed = [k for k in drivers if k not in set(chosen)]
    foreign = [k for k in chosen if k[0] != cluster.driver]
    unknown = _unpublished_references(expressions, everything)
    assert not missed and not foreign, (
        f"DeviceClass {cluster.device_class} selects {len(chosen)} devices; {cluster.driver} publishes {len(drivers)}"
        + (f"\n- not selected ({len(missed)}): {_names(['/'.join(k[1:]) for k in missed])}" if missed else "")
        + (f"\n- selected but not {cluster.driver}'s ({len(foreign)}): {_names(['/'.join(k) for k in foreign])}" if foreign else "")
        + f"\n- selectors: {expressions}"
        + (f"\n- read but published by no device: {', '.join(unknown)}" if unknown else "")
        + (f"\n- evaluation errors: {errors}" if errors else "")
    )


def test_every_node_with_slices_has_a_running_driver(cluster, slices):
    """Slices whose driver is gone are stale: the scheduler still allocates from them."""
    nodes = sorted({s["spec"]["nodeName"] for s in slices if s["spec"].get("nodeName")})
    running = {node: cluster.driver_running(node) for node in nodes}
    if all(v is None for v in running.values()):
        namespace, name = cluster.profile.driver_daemonset
        raise NotEstablished(f"cannot tell which pods run {cluster.driver}: no DaemonSet {namespace}/{name or '?'} "
                             "(set the profile's driverDaemonSet or --driver-daemonset)")
    stale = [n for n, up in running.items() if up is False]
    assert not stale, f"slices of {', '.join(stale)} are stale: no {cluster.driver} driver runs there"
