"""What a kind run could leave on this host, and what a run's junit says: shared by the kind modules."""

from __future__ import annotations

import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

from dra_harness.providers.kind import engine


def docker(*args: str) -> list[str]:
    out = subprocess.run(["docker", *args], capture_output=True, text=True)
    return out.stdout.split() if out.returncode == 0 else []


def host() -> dict[str, object]:
    """What the kind flow could leave on this host."""
    saved = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    return {
        "engine": engine.running(),
        "containers": docker("ps", "-aq"),
        "networks": sorted(docker("network", "ls", "--format", "{{.Name}}")),
        "volumes": docker("volume", "ls", "-q"),
        "docker_chains": sorted(set(re.findall(r"^:(DOCKER\S*)", saved, re.M))),
        "links": sorted(ln for ln in os.listdir("/sys/class/net") if _dockers(ln)),
    }


def _dockers(link: str) -> bool:
    """Docker's bridges and the veths on them. Not every veth: the other test worker's embedded clusters with
    real nodes add and remove veths of their own (on their drah* bridges) while kind runs here."""
    if re.fullmatch(r"docker0|br-[0-9a-f]{12}", link):
        return True
    try:
        master = os.path.basename(os.readlink(f"/sys/class/net/{link}/master"))
    except OSError:  # no bridge (or gone meanwhile)
        return False
    return link.startswith("veth") and bool(re.fullmatch(r"docker0|br-[0-9a-f]{12}", master))


def cases(report: Path) -> dict[str, str]:
    """Test name -> passed | skipped | failed, from the run's junit."""
    out = {}
    for case in ET.parse(report / "junit.xml").getroot().iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        out[name] = "skipped" if case.find("skipped") is not None else (
            "failed" if case.find("failure") is not None or case.find("error") is not None else "passed")
    return out


