"""Every command and file path the README and the docs quote exists.

Docs drift the quiet way: a flag renamed, a module moved, and the page still reads well. Here each
``./harness ...`` / ``dra-harness ...`` in a code span or block is walked down the CLI's own command
tree (click), its ``--flags`` checked against that command's options; each quoted path of the
repository (``fixtures/...``, ``src/...``, a ``.py`` module of the package) must exist. The negative
control quotes a command, a flag and a path that do not.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from dra_harness.cli.app import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Quoted paths that are not this repository's: upstream's module, a placeholder for the user's run directory.
NOT_OURS = {"test/e2e/e2e_setup_test.go", "RUN_DIR/canary.json"}
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")
_COMMAND = re.compile(r"(?:\./harness|(?<![\w/.-])dra-harness)[ \t]+([^\n|#;&)`]*)")
_ROOTS = ("src/", "tests/", "fixtures/", "scenarios/", "suites/", "docs/", "kind/", "deploy/", "bench/", ".ci/")


def _code(text: str) -> list[str]:
    """The page's code: fenced blocks, then inline spans outside them."""
    blocks = _FENCE.findall(text)
    return blocks + _SPAN.findall(_FENCE.sub("", text))


def command_problems(code: str) -> list[str]:
    out = []
    for m in _COMMAND.finditer(code):
        words, cmd, path = m.group(1).split(), main, []
        while words and words[0].startswith("-"):  # the tool's own options (-vv, --log-level INFO) first
            given = words.pop(0)
            option = next((p for p in main.params if given in getattr(p, "opts", [])), None)
            if option is not None and not getattr(option, "is_flag", False) and not getattr(option, "count", False) and words:
                words.pop(0)
        while words and isinstance(cmd, click.Group) and not words[0].startswith("-"):
            sub = cmd.commands.get(words[0])
            if sub is None:
                break
            cmd, path = sub, [*path, words.pop(0)]
        if isinstance(cmd, click.Group) and words and not words[0].startswith(("-", "[", "<", "...")):
            out.append(f"`{' '.join(['dra-harness', *path, words[0]])}`: no such command")
            continue
        options = {o for p in cmd.params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}
        for word in words:
            if word == "--":  # pytest's arguments follow
                break
            flag = word.split("=")[0].strip("[]").rstrip(",.")
            if flag.startswith("--") and len(flag) > 2 and flag not in options and flag != "--help":
                out.append(f"`dra-harness {' '.join(path)}` has no option {flag}")
            # A file of this repository a shown command is given (README's `--manifests deploy/claims.yaml` was none).
            shown = word.split("=", 1)[-1]
            if shown.startswith(_ROOTS) and not any(c in shown for c in "<>*{}$") and not (ROOT / shown).exists():
                out.append(f"`dra-harness {' '.join(path)}` is shown a file that does not exist: {shown}")
    return out


def path_problems(code: str) -> list[str]:
    out = []
    for token in (t.strip() for t in _SPAN.findall(f"`{code}`") or [code]):
        if any(c in token for c in "<>*{} $=") or token in NOT_OURS:
            continue
        if token.startswith(_ROOTS) or (token.endswith((".py", ".yaml", ".json", ".j2")) and "/" in token):
            if not any((base / token).exists() for base in (ROOT, ROOT / "src" / "dra_harness", ROOT / "src")):
                out.append(f"`{token}`: no such file or directory")
    return out


def problems(text: str) -> list[str]:
    out = []
    for code in _code(text):
        out += command_problems(code)
        out += path_problems(code) if "\n" not in code else []
    return out


def test_every_command_flag_and_path_the_docs_quote_exists():
    found = {page.name: problems(page.read_text()) for page in PAGES}
    assert not {k: v for k, v in found.items() if v}, found


def test_negative_control_a_renamed_flag_a_missing_command_and_a_moved_file_are_reported():
    page = ("Run `./harness cluster up --node-image x --no-such-flag 1`, then\n```sh\n./harness clusters up\n```\n"
            "and read `providers/embedded/oci.py`.\n")
    assert sorted(problems(page)) == ["`dra-harness cluster up` has no option --no-such-flag",
                                      "`dra-harness clusters`: no such command",
                                      "`providers/embedded/oci.py`: no such file or directory"]


def test_negative_control_a_shown_command_given_a_file_that_does_not_exist_is_reported():
    page = "`./harness upgrade check --to 1.38 --manifests deploy/claims.yaml`\n"
    assert problems(page) == ["`dra-harness upgrade check` is shown a file that does not exist: deploy/claims.yaml"]
