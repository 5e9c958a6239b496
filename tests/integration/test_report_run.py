"""Real runs' reports: a browser renders the verdict, JUnit and Allure load, no secret leaks, Ctrl-C leaves a report.

Each test runs ``dra-harness run`` the way a user does (a separate process, its own
embedded cluster or an existing one) on a few quick suites, then inspects the run
directory it wrote.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from junitparser import JUnitXml

from dra_harness.components import prereqs
from dra_harness.components.build import checkout_root
from dra_harness.providers.embedded.cluster import LocalCluster

ROOT = checkout_root()
#: Every concern these select establishes a pass on the embedded cluster, so the run is PASS: GPU visibility's
#: `sharing_a_claim` check would only skip there (no NVIDIA GPU) and make it PARTIAL.
QUICK = ["-k", "(inventory or taint or sharing_a_claim) and not gpu_visibility"]
PASS_GREEN = (0x1A, 0x7F, 0x37)
FAIL_RED = (0xCF, 0x22, 0x2E)


def _harness(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dra_harness.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def real_run(binaries, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("report") / "run"
    proc = _harness("run", "--report-dir", str(out), "--nodes", "2", "--gpus-per-node", "4", "--real-nodes", "0",
                    "--design-file", str(ROOT / "fixtures/designs/example.yaml"), *QUICK)
    return out, proc


def test_a_run_ends_by_printing_the_path_of_its_signoff(real_run):
    out, proc = real_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(out / "signoff.html")
    for name in ("junit.xml", "summary.json", "signoff.md", "signoff.html", "fingerprint.json",
                 "allure-results/environment.properties", "allure-results/categories.json"):
        assert (out / name).is_file(), name


def test_the_fingerprint_reads_gates_from_every_component_and_the_inventory_from_slices(real_run):
    out, _ = real_run
    fp = json.loads((out / "summary.json").read_text())["fingerprint"]
    assert fp["kubernetes"]["gitVersion"] == "v1.37.2"
    gates = fp["feature_gates"]
    assert gates["status"] == "read"
    assert set(gates["components"]) == {"kube-apiserver", "kube-controller-manager", "kube-scheduler"}
    assert {"DynamicResourceAllocation", "DRADeviceTaintRules", "DRAPartitionableDevices"} <= set(gates["enabled"])
    assert "v1" in fp["resource_api"]["versions"] and fp["resource_api"]["device_taint_rules"]
    assert [c["name"] for c in fp["device_classes"]] == ["gpu.example.com"]
    inv = fp["inventory"]["gpu.example.com"]
    assert inv["devices"] == 8 and sorted(inv["nodes"]) == ["gpu-node-0", "gpu-node-1"]
    assert inv["nodes"]["gpu-node-0"] == {"devices": 4, "models": {"LATEST-GPU-MODEL": 4}, "memory": {"80Gi": 4},
                                          "driver_versions": ["1.0.0"]}
    assert fp["drivers"][0]["build"] == "dra-example-kubeletplugin v0.4.0" and "--design-file" in fp["command"]
    # Read again when the session finished, before teardown: the DynamicResources plugin's timings over the run.
    # Which points have a figure depends on the scheduler's sampling (10 % of cycles): a few pods may give none.
    timings = fp["scheduler_dra"]
    assert timings["over"] == "the whole run" and isinstance(timings["mean_s"], dict), timings
    assert all(0 <= v < 5 for v in timings["mean_s"].values()), timings


def test_junit_xml_parses_with_a_junit_parser_and_matches_the_summary(real_run):
    out, _ = real_run
    xml = JUnitXml.fromfile(str(out / "junit.xml"))
    cases = [c for suite in xml for c in suite]
    summary = json.loads((out / "summary.json").read_text())
    assert len(cases) == len(summary["results"]) >= 8
    assert all(c.classname.startswith("suites.test_") and c.name.startswith("test_") for c in cases)
    assert all(c.is_passed or c.is_skipped for c in cases)


def test_allure_results_load(real_run):
    out, _ = real_run
    allure = out / "allure-results"
    results = [json.loads(p.read_text()) for p in allure.glob("*-result.json")]
    assert len(results) == len(json.loads((out / "summary.json").read_text())["results"])
    uuids = {r["uuid"] for r in results}
    with_evidence = 0
    for r in results:
        assert r["status"] in ("passed", "failed", "broken", "skipped") and r["historyId"]
        assert r["name"] and r["fullName"].startswith("suites.test_") and r["start"] <= r["stop"]
        assert all(set(label) == {"name", "value"} for label in r["labels"])
        for a in r.get("attachments", []):
            assert (allure / a["source"]).is_file(), a
            if a["name"] == "dra-harness evidence":
                with_evidence += 1
                assert isinstance(json.loads((allure / a["source"]).read_text()), list)
    assert with_evidence >= 3
    for p in allure.glob("*-container.json"):
        assert set(json.loads(p.read_text()).get("children", [])) <= uuids
    env = dict(line.split("=", 1) for line in (allure / "environment.properties").read_text().splitlines())
    assert env["Kubernetes"] == "v1.37.2" and env["Verdict"] == "PASS"
    categories = json.loads((allure / "categories.json").read_text())
    assert all(c["name"] and c["matchedStatuses"] for c in categories)


def _screenshot(html: Path, png: Path) -> tuple[object, str]:
    """Pixels (RGB ints) of a 1280x900 headless-Chromium screenshot, and the rendered DOM."""
    from matplotlib.image import imread

    base = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,900"]
    subprocess.run([*base, f"--screenshot={png}", html.as_uri()], capture_output=True, timeout=120, check=True)
    dom = subprocess.run([*base, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout
    return (imread(png)[:, :, :3] * 255).round().astype(int), dom


def test_headless_chromium_shows_the_verdict(real_run, tmp_path):
    prereqs.ensure(["chromium"], "rendering signoff.html in a browser")
    out, _ = real_run
    pixels, dom = _screenshot(out / "signoff.html", tmp_path / "shot.png")
    assert len({tuple(p) for p in pixels[::20, ::20].reshape(-1, 3)}) > 5, "blank screenshot"
    assert tuple(pixels[15, 640]) == PASS_GREEN, f"verdict banner not green: {tuple(pixels[15, 640])}"
    assert "Verdict: PASS" in dom and "Design record" in dom and "Questions for the GPU vendor" in dom
    # Control: the same check on a failing run sees red, so the pixel check can fail.
    from dra_harness.report import write_report
    from tests.unit.report_runs import make_run

    failing = make_run(tmp_path / "failing", tests=[("allocation", "test_a_capacity_selector_is_honoured", "failed", 1.0, [])])
    pixels, dom = _screenshot(write_report(failing), tmp_path / "failing.png")
    assert tuple(pixels[15, 640]) == FAIL_RED and "Verdict: FAIL" in dom


def test_the_signoff_says_where_the_checks_ran_and_shows_no_raw_json_by_default(real_run, tmp_path):
    """The provenance line is in the banner a browser draws, and the evidence cells read as phrases, not JSON."""
    from tests.unit.test_report_provenance import RAW_JSON, visible_evidence

    prereqs.ensure(["chromium"], "rendering signoff.html in a browser")
    out, _ = real_run
    _, dom = _screenshot(out / "signoff.html", tmp_path / "shot.png")
    banner = dom.split('<header id="verdict">', 1)[1].split("</header>", 1)[0]
    # Two KWOK nodes, the example driver, no real node: the reader is told all three.
    assert 'id="provenance">On simulated devices: 8 from the example driver (gpu.example.com) on 2 simulated (KWOK) nodes' in banner
    assert "no container ran" in banner and "no GPU" in banner
    shown = visible_evidence(dom)
    assert "node gpu-node-" in shown and not RAW_JSON.search(shown), shown[:2000]
    summary = json.loads((out / "summary.json").read_text())
    assert all(r["provenance"]["text"] for r in summary["results"])


#: Fraction of non-white pixels (at 20 dpi) below which a page is blank: one short word is about 0.0004.
BLANK = 0.0001


def _pages(pdf: Path, tmp_path: Path) -> list[tuple[str, float]]:
    """(text, fraction of non-white pixels) per page of a PDF, through poppler's pdftotext and pdftoppm."""
    from matplotlib.image import imread

    prereqs.ensure(["poppler-utils"], "reading signoff.pdf back")
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    pages = text.split("\f")[:-1] if text.endswith("\f") else text.split("\f")
    tmp_path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["pdftoppm", "-r", "20", "-png", str(pdf), str(tmp_path / "page")], check=True, capture_output=True)
    ink = []
    for png in sorted(tmp_path.glob("page-*.png")):
        pixels = imread(png)[:, :, :3]
        ink.append(float((pixels.min(axis=2) < 0.9).mean()))
    assert len(ink) == len(pages), (len(ink), len(pages))
    return list(zip(pages, ink, strict=True))


def test_signoff_pdf_gives_each_concern_its_own_pages_and_no_page_is_blank(real_run, tmp_path):
    out, _ = real_run
    proc = _harness("report", str(out), "--pdf", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pages = _pages(out / "signoff.pdf", tmp_path / "run")
    assert pages[0][0].lstrip().startswith("Verdict: PASS")
    concerns = json.loads((out / "summary.json").read_text())["concerns"]
    # A concern starts its page (the first may follow the "Concerns" heading): its title is in the page's top lines.
    tops = [" ".join(p.strip().splitlines()[:3]) for p, _ in pages]
    for c in concerns:
        assert any(top.startswith(c["title"]) or (top.startswith("Concerns") and c["title"] in top)
                   for top in tops), f"no page starts with {c['title']}"
    assert len(pages) >= len(concerns) + 1
    blank = [i + 1 for i, (_, ink) in enumerate(pages) if ink < BLANK]
    assert not blank, f"blank pages: {blank}"
    # Control: a PDF with a blank page in it is caught by the same pixel check.
    html = tmp_path / "blank.html"
    html.write_text('<p>one</p><div style="break-after:page"></div><div style="break-after:page">&nbsp;</div><p>three</p>')
    from dra_harness.report.pdf import print_pdf

    ink = [i for _, i in _pages(print_pdf(html, tmp_path / "blank.pdf"), tmp_path / "control")]
    assert [i + 1 for i, x in enumerate(ink) if x < BLANK] == [2], ink


def test_a_compare_of_two_real_runs_shows_their_provenance_first_and_no_raw_json(real_run, tmp_path):
    """Acceptance of ``compare`` and of the main job's default: the second run names no ``--real-nodes``, so it gets a
    real node where this host can run one (else says why in one line) and checks containers there; both runs side
    by side in a browser show the provenance row first, naming each run's nodes, and evidence as text."""
    from dra_harness.components.real_node_host import unavailable_reason
    from tests.unit.test_report_compare import _evidence_cells

    prereqs.ensure(["chromium"], "rendering compare.html in a browser")
    first, _ = real_run
    second = tmp_path / "second"
    proc = _harness("run", "--report-dir", str(second), "--nodes", "1", "--gpus-per-node", "2",
                    "-k", "inventory or containers_see_exactly")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    why_not = unavailable_reason()
    real = json.loads((second / "fingerprint.json").read_text())["nodes"]["counts"].get("real", 0)
    assert real == (0 if why_not else 1), (why_not, real)
    if why_not:
        assert f"no real nodes: {why_not}" in proc.stderr
    proc = _harness("compare", str(first), str(second), "--label", "simulated", "--label", "default",
                    "--out", str(tmp_path / "cmp"), timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == str(tmp_path / "cmp" / "compare.html"), proc.stderr
    pixels, dom = _screenshot(tmp_path / "cmp" / "compare.html", tmp_path / "compare.png")
    assert len({tuple(p) for p in pixels[::20, ::20].reshape(-1, 3)}) > 5, "blank screenshot"
    row = re.search(r'<tr class="provenance[^"]*"><th>(.*?)</tr>', dom, re.S)
    assert row, "no provenance row"
    assert "on 2 simulated (KWOK) nodes; no container ran" in row.group(1), row.group(1)
    if not why_not:
        assert "on 1 real kubelet node, 1 simulated (KWOK) node; container checks on 1 real node (3 checks)" in row.group(1)
    assert dom.index('class="provenance') < dom.index("Kubernetes</th>")
    cells = _evidence_cells(dom)
    assert cells and not any(c in cell for cell in cells for c in "{}"), cells
    assert (tmp_path / "cmp" / "compare.md").read_text().count("| ") > 10


def test_report_re_renders_a_run(real_run):
    out, _ = real_run
    before = json.loads((out / "summary.json").read_text())
    proc = _harness("report", str(out), timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == str(out / "signoff.html")
    after = json.loads((out / "summary.json").read_text())
    assert after["verdict"] == before["verdict"] and after["results"] == before["results"]
    # Re-rendering does not attach the evidence twice.
    for p in (out / "allure-results").glob("*-result.json"):
        names = [a["name"] for a in json.loads(p.read_text()).get("attachments", [])]
        assert names.count("dra-harness evidence") <= 1


def test_report_allure_generates_a_report_chromium_opens_with_the_runs_test_count(real_run):
    prereqs.ensure(["chromium"], "rendering the Allure report in a browser")
    from tests.integration.test_allure_report import _dom, shown_test_cases

    out, _ = real_run
    proc = _harness("report", str(out), "--allure", timeout=900)
    index = out / "allure-report" / "index.html"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines() == [str(out / "signoff.html"), str(index)]
    results = json.loads((out / "summary.json").read_text())["results"]
    assert len(results) >= 8 and shown_test_cases(_dom(index)) == len(results)
    assert "allure-report/index.html" in json.loads((out / ".dra-harness-run").read_text())["files"]


def test_no_report_file_holds_a_secret_of_the_kubeconfig(small_cluster, tmp_path):
    """Existing-cluster path with every credential embedded in the kubeconfig, plus a token user."""
    config = yaml.safe_load(small_cluster.kubeconfig.read_text())
    secrets: list[str] = []

    def embed(section: dict, key: str) -> None:
        raw = Path(section.pop(key)).read_bytes()
        section[f"{key}-data"] = base64.b64encode(raw).decode()
        secrets.append(section[f"{key}-data"])
        secrets.extend(line for line in raw.decode().splitlines() if len(line) >= 40 and "-----" not in line)

    embed(config["clusters"][0]["cluster"], "certificate-authority")
    embed(config["users"][0]["user"], "client-certificate")
    embed(config["users"][0]["user"], "client-key")
    token = "dra" + base64.b32encode(os.urandom(20)).decode().lower()
    config["users"].append({"name": "ci-bot", "user": {"token": token}})
    config["contexts"].append({"name": "ci-bot", "context": {"cluster": config["clusters"][0]["name"], "user": "ci-bot"}})
    secrets.append(token)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    # --min-established 0: this run is judged on its files' secrets; without --expected-hardware it establishes little.
    proc = _harness("run", "--cluster", "existing", "--kubeconfig", str(kubeconfig), "--report-dir", str(out),
                    "--min-established=0", "-k", "inventory")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > 10
    assert _leaks(files, secrets) == []
    # Control: the scan finds a secret planted in a copy of a report file.
    planted = tmp_path / "planted.json"
    planted.write_text((out / "summary.json").read_text() + secrets[-1])
    assert _leaks([planted], secrets) == [str(planted)]
    fp = json.loads((out / "summary.json").read_text())["fingerprint"]
    assert fp["provider"] == "existing" and fp["feature_gates"]["components"].keys() == {"kube-apiserver"}


def _leaks(files: list[Path], secrets: list[str]) -> list[str]:
    return [str(p) for p in files if b"PRIVATE KEY" in p.read_bytes() or any(x.encode() in p.read_bytes() for x in secrets)]


def test_an_interrupted_run_leaves_a_report_marked_incomplete(binaries, tmp_path):
    out = tmp_path / "run"
    log = tmp_path / "stdout"
    proc = subprocess.Popen([sys.executable, "-m", "dra_harness.cli", "run", "--report-dir", str(out), "--real-nodes", "0", "--nodes", "1",
                             "--gpus-per-node", "2"], cwd=ROOT, stdout=log.open("w"), stderr=(tmp_path / "stderr").open("w"))
    try:
        deadline = time.monotonic() + 180
        while not (out / "fingerprint.json").exists() or not (out / "evidence.jsonl").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the run never reached its suites"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "INCOMPLETE" and not summary["complete"]
    assert summary["exit_code"] == 130, (tmp_path / "stderr").read_text()[-2000:]
    assert "Verdict: INCOMPLETE" in (out / "signoff.html").read_text()
    assert log.read_text().strip().splitlines()[-1] == str(out / "signoff.html")
    assert not LocalCluster(f"run-{summary['run_id']}").exists()
    assert not list(Path(tempfile.gettempdir()).glob(f"dra-harness-{summary['run_id']}*"))
