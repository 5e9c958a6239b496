"""A user's chart values for kind: checked before anything starts, passed after ours, secrets never written."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_harness.errors import InputError
from dra_harness.providers.chart_values import helm_user_args, shown_helm_args
from dra_harness.providers.kind.driver import helm_command


def test_values_files_come_before_set_pairs_and_both_after_ours(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("deviceProfile: net\n")
    user = helm_user_args(("kubeletPlugin.gpuPartitions=4",), (str(values),))
    assert user == ("--values", str(values.resolve()), "--set", "kubeletPlugin.gpuPartitions=4")
    argv = helm_command("helm", Path("kc"), Path("chart"), "img:v1", 8, user)
    # Helm takes the last --set of a key: the user's numDevices would win over ours.
    assert argv.index("kubeletPlugin.numDevices=8") < argv.index("kubeletPlugin.gpuPartitions=4") < argv.index("--wait")


@pytest.mark.parametrize(("sets", "text", "message"), [
    (("=4",), None, "--helm-set '=4': expected KEY=VALUE"),
    (("noequals",), None, "expected KEY=VALUE"),
    ((), "- a list\n", "expected a mapping of chart values, got list"),
    ((), "a: [unclosed\n", "not a readable YAML file"),
])
def test_bad_chart_values_are_one_line_naming_the_input(tmp_path, sets, text, message):
    files = ()
    if text is not None:
        (tmp_path / "v.yaml").write_text(text)
        files = (str(tmp_path / "v.yaml"),)
    with pytest.raises(InputError, match=message):
        helm_user_args(sets, files)


def test_a_value_whose_key_names_a_secret_is_not_recorded():
    shown = shown_helm_args(("--set", "image.pullSecretToken=abc123", "--set", "kubeletPlugin.gpuPartitions=4"))
    assert shown == ["--set", "image.pullSecretToken=(not recorded)", "--set", "kubeletPlugin.gpuPartitions=4"]
    assert "abc123" not in " ".join(shown)
