"""A run that established too little does not pass silently: the share, the first reasons, the options to pass."""

from __future__ import annotations

import json
from pathlib import Path
from xml.sax.saxutils import quoteattr

from dra_harness.report.coverage import shortfall

POLICY = "not established: the cluster's ValidatingAdmissionPolicy refused it: namespaces must carry a team label"


def junit(run_dir: Path, passed: int, not_established: int) -> None:
    cases = [f'<testcase classname="suites.test_x" name="test_p{i}" time="1"/>' for i in range(passed)]
    cases += [f'<testcase classname="suites.test_x" name="test_n{i}" time="0"><skipped message={quoteattr(POLICY)}>'
              f'</skipped></testcase>' for i in range(not_established)]
    (run_dir / "junit.xml").write_text(f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>')


def test_seven_of_ninety_three_established_is_one_line_with_the_reason_and_the_preflights_option(tmp_path):
    junit(tmp_path, 7, 86)
    (tmp_path / "preflight.json").write_text(json.dumps({"hints": [
        "--namespace-label KEY=VALUE or --namespace-annotation KEY=VALUE as the cluster's policy asks (creating a ...)"]}))
    line = shortfall(tmp_path, 50)
    assert line is not None and "\n" not in line
    assert line.startswith("established 7 of 93 checks (7 %), below --min-established 50 %: first missing: "
                           "the cluster's ValidatingAdmissionPolicy refused it")
    assert line.endswith("options that would help: --namespace-label KEY=VALUE or --namespace-annotation KEY=VALUE "
                         "as the cluster's policy asks")


def test_the_embedded_runs_share_passes_and_the_bound_is_the_users(tmp_path):
    """Negative control: 81 of 93 (the embedded default run) is enough at 50 % and not at 90 %."""
    junit(tmp_path, 81, 12)
    assert shortfall(tmp_path, 50) is None
    assert shortfall(tmp_path, 90) is not None
    assert shortfall(tmp_path, 0) is None
