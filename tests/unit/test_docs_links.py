"""The README stays short over a docs site whose links resolve.

Fast, no network. Every relative markdown link in README.md and docs/*.md
points to a file that exists, and a link with an anchor into a markdown page to a heading that produces
that anchor (GitHub's slug rule); every docs page is in mkdocs.yml's nav and in the README's index; the
README is at most 250 lines and still holds the two set-up commands; and mkdocs builds the site in
strict mode. The negative controls run the same checker on a small page with broken links and expect
each one reported, and give mkdocs a page with a broken anchor.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250

# The two set-up commands, as README.md's "Set-up on a fresh machine" held them when the docs were split out.
SETUP_HEADING = "## Set-up on a fresh machine"
SETUP_BLOCKS = ("```sh\n./harness run\n```", "```sh\n./harness selftest\n```")

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose(text: str) -> str:
    """The text without fenced code blocks (blank lines kept, so line numbers hold) or inline code."""
    without_fences = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _CODE_SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), without_fences)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation but hyphens and spaces removed, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a markdown file's headings produce (outside code blocks), duplicates numbered as GitHub does."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text(encoding="utf-8"))
    for line in text.splitlines():
        m = _HEADING.match(line)
        if not m:
            continue
        slug = github_slug(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image in a markdown file, outside code."""
    prose = _prose(path.read_text(encoding="utf-8"))
    return [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in _LINK.finditer(prose)]


def broken_links(path: Path) -> list[str]:
    """Each relative link of a markdown file whose file, or whose heading anchor in a .md file, does not exist."""
    problems = []
    for line, target in links(path):
        if _SCHEME.match(target) or target.startswith("//"):
            continue  # http(s), mailto: not this test's business (no network)
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.name}:{line}: ({target})"
        if not dest.exists():
            problems.append(f"{where} no such file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where} no heading in {dest.name} gives #{anchor}")
    return problems


def _pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def _nav_files(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [f for item in nav for f in _nav_files(item)]
    if isinstance(nav, dict):
        return [f for value in nav.values() for f in _nav_files(value)]
    return []


def test_every_relative_link_in_the_readme_and_the_docs_resolves():
    assert _pages(), "docs/*.md: no pages"
    problems = [p for f in [README, *_pages()] for p in broken_links(f)]
    assert not problems, "\n".join(problems)


def test_every_docs_page_is_in_the_mkdocs_nav_and_the_readme_index():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["docs_dir"] == "docs"
    nav = _nav_files(config["nav"])
    pages = {p.name for p in _pages()}
    assert pages - set(nav) == set(), f"docs pages missing from mkdocs.yml's nav: {sorted(pages - set(nav))}"
    assert set(nav) - pages == set(), f"mkdocs.yml's nav names pages that do not exist: {sorted(set(nav) - pages)}"
    in_readme = {Path(t.partition("#")[0]).name for _, t in links(README) if t.startswith("docs/")}
    missing = pages - {"index.md"} - in_readme
    assert not missing, f"docs pages the README's index does not link: {sorted(missing)}"


def test_the_readme_is_short_and_keeps_its_two_setup_commands():
    text = README.read_text(encoding="utf-8")
    n = len(text.splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines, at most {MAX_README_LINES}: move content to docs/"
    assert SETUP_HEADING in text.splitlines()
    section = text.split(SETUP_HEADING + "\n", 1)[1].split("\n## ", 1)[0]
    for block in SETUP_BLOCKS:
        assert block in section, f"README's {SETUP_HEADING!r} lost its set-up command:\n{block}"


def test_github_slugs():
    assert github_slug("Go/no-go for an upgrade: `upgrade check --to VERSION`") == "gono-go-for-an-upgrade-upgrade-check---to-version"
    assert github_slug("Where the project's test time goes") == "where-the-projects-test-time-goes"
    assert github_slug("Why is my pod Pending?") == "why-is-my-pod-pending"


def test_negative_control_the_checker_reports_broken_links(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## Real heading\n\n## Real heading\n", encoding="utf-8")
    (tmp_path / "img.png").write_bytes(b"")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md) [fine](other.md#real-heading) [fine](other.md#real-heading-1) ![fine](img.png)\n"
        "[fine](#page) [external](https://example.com/missing.md) `[in code](nowhere.md)`\n"
        "[gone](missing.md)\n"
        "[bad anchor](other.md#no-such-heading)\n"
        "![gone image](figures/none.png)\n"
        "[bad local anchor](#nothing-here)\n\n"
        "```sh\n# not a heading\n[in a fence](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    problems = broken_links(page)
    assert len(problems) == 4, "\n".join(problems)
    for target in ("(missing.md)", "(other.md#no-such-heading)", "(figures/none.png)", "(#nothing-here)"):
        assert any(target in p for p in problems), (target, problems)
    assert "not-a-heading" not in anchors(page)


def _mkdocs_strict(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir",
                           str(site)], capture_output=True, text=True, timeout=120)


def test_the_docs_site_builds_with_mkdocs_in_strict_mode(tmp_path):
    """The site itself, as mkdocs renders it (its own anchor rule too): a warning fails the build."""
    built = _mkdocs_strict(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "upgrades" / "index.html").is_file()


def test_negative_control_a_broken_anchor_fails_the_strict_build(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    (docs / "report.md").write_text((docs / "report.md").read_text() + "\nSee [nowhere](upgrades.md#no-such-heading).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((ROOT / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}"))
    built = _mkdocs_strict(config, tmp_path / "site")
    assert built.returncode != 0 and "no-such-heading" in built.stdout + built.stderr
