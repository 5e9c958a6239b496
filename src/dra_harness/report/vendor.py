"""The questions the seed guidance says to put to a GPU vendor, with what this run could answer.

DRA hands out devices; whether a tenant's memory, compute and errors stay its own is
up to the driver and the hardware. A run on simulated nodes can establish the API's
side (exclusive allocation, published capacity, partitions, taints), never the
device's side; the report says which is which, so nobody signs an answer we do not have.
"""

from __future__ import annotations


from dra_harness.kube.types import Obj


def _passed(results: list[Obj], fragment: str) -> str | None:
    for r in results:
        if fragment in r["test"]:
            return r["outcome"]
    return None


def _line(results: list[Obj], fragment: str, text: str) -> tuple[str, str] | None:
    o = _passed(results, fragment)
    return (text, o) if o else None


def questions(results: list[Obj], fingerprint: Obj) -> list[Obj]:
    gates = (fingerprint.get("feature_gates") or {}).get("enabled") or []
    inv = fingerprint.get("inventory") or {}
    partitions = any(d.get("partitions_published") for d in inv.values() if isinstance(d, dict))
    memory = sorted({m for d in inv.values() if isinstance(d, dict) for n in d.get("nodes", {}).values() for m in n["memory"]})
    containers = _passed(results, "containers_see_exactly")
    on_device = containers == "passed"

    def est(*items: tuple[str, str] | None) -> list[Obj]:
        return [{"fact": t, "outcome": o} for t, o in (i for i in items if i)]

    return [
        {
            "question": "Memory isolation: is a tenant's GPU memory inaccessible to, and unaffected by, other tenants?",
            "established": est(
                ("devices publish memory capacity " + (", ".join(memory) if memory else "(none published)"), "observed"),
                _line(results, "capacity_selector_is_honoured", "claims select devices by memory capacity"),
                _line(results, "templates_never_share", "template claims never share a device"),
            ),
            "not_established": [] if on_device else [
                "enforcement of memory limits inside a container (no container ran on a real device in this run)",
                "memory scrubbing between tenants",
            ],
            "ask_vendor": "How is device memory isolated between claims under each sharing mode, and is it cleared between tenants?",
        },
        {
            "question": "Compute isolation: does one tenant's load slow another's?",
            "established": est(
                _line(results, "templates_never_share", "one device per template claim (no time-sharing unless asked)"),
                _line(results, "sharing_a_claim_see_the_same_device", "sharing happens only through an explicitly shared claim"),
            ),
            "not_established": ["time-slice or MPS limits under load (needs real devices and a load test)"],
            "ask_vendor": "What compute share does each sharing mode guarantee, and how is it enforced?",
        },
        {
            "question": "Error containment: does a device fault or driver failure stay with the affected workload?",
            "established": est(
                _line(results, "running_pods_and_their_allocations_survive", "running pods keep their allocations across a driver restart"),
                _line(results, "no_execute_taint_evicts", "a NoExecute device taint evicts the pods using the device"),
                ("health status gates on: " + ", ".join(g for g in gates if g.startswith("ResourceHealth")), "observed")
                if any(g.startswith("ResourceHealth") for g in gates) else None,
            ),
            "not_established": [
                "behaviour on a real device fault (Xid/ECC error): which pods are affected, and whether the driver taints the device",
            ],
            "ask_vendor": "On a device error, which workloads are affected, and does the driver report health or taint the device?",
        },
        {
            "question": "Sharing and partitioning modes: which are offered, and how are they requested?",
            "established": est(
                _line(results, "sharing_a_claim_see_the_same_device", "shared claims: one device, several pods"),
                ("partitionable devices gate " + ("on" if "DRAPartitionableDevices" in gates else "off or unknown"), "observed"),
                ("partitions (shared counters) published by the driver: " + ("yes" if partitions else "no"), "observed"),
                ("consumable capacity gate " + ("on" if "DRAConsumableCapacity" in gates else "off or unknown"), "observed"),
            ),
            "not_established": [] if on_device else [
                "that the opaque sharing config (time-slicing, MPS) takes effect on the device",
                "MIG-style partitions on real hardware",
            ],
            "ask_vendor": "Which sharing modes (time-slicing, MPS, MIG or equivalent) does the DRA driver support, and with what isolation each?",
        },
    ]
