"""README.md and docs/: a one-screen quick start, the docs pages, links that resolve, and one source per figure.

A result quoted in README.md or docs/ is written as a link to the report it comes from, e.g.
`[0.51-0.605](experiments/grpo_objectives/results/report.md)`: every number in the link's text must appear in the
linked file, so a figure changed on one side only fails here. Links to folders and other pages must resolve.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCS = ("grpo", "d2l", "contrastive", "models", "memory_and_hardware", "kernels", "rollout", "scaleout", "gpu", "runs")
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
NUMBER = re.compile(r"(?<![\d.])[+-]?\d+(?:\.\d+)?")  # a sign only where no digit precedes it (0.51-0.605: a range)
FENCED = re.compile(r"```.*?```", re.DOTALL)
INDENTED = re.compile(r"^    .*$", re.MULTILINE)


def _links(text: str):
    """(link text, target) for every markdown link outside indented or fenced code."""
    return LINK.findall(INDENTED.sub("", FENCED.sub("", text)))


def _numbers(text: str) -> list[str]:
    """The figures of a text, as written (a leading + kept: +0.47 and 0.47 are different claims)."""
    return NUMBER.findall(text.replace("−", "-"))


def figure_mismatches(page: Path) -> list[str]:
    """Links whose text holds a figure the linked file does not: 'page: [text](target): missing 0.61'."""
    out = []
    for label, target in _links(page.read_text()):
        figures = _numbers(re.sub(r"`[^`]*`", "", label))
        path = (page.parent / target.split("#")[0]).resolve()
        if not figures or not path.is_file():
            continue
        source = path.read_text().replace("−", "-")
        missing = [f for f in figures if not re.search(rf"(?<![\d.]){re.escape(f)}(?![\d])", source)]
        if missing:
            out.append(f"{page.relative_to(ROOT)}: [{label}]({target}): missing {', '.join(missing)}")
    return out


def test_quick_start_fits_one_screen():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    lines = section.strip("\n").splitlines()
    assert len(lines) <= 30, len(lines)
    assert "    make train" in section and "    make test" in section


def test_docs_pages_exist_and_the_readme_links_them():
    readme = (ROOT / "README.md").read_text()
    for name in DOCS:
        page = ROOT / "docs" / f"{name}.md"
        assert page.is_file(), page
        assert page.read_text().startswith("# ")
    linked = {Path(t).stem for _, t in _links(readme) if t.startswith("docs/")}
    assert set(DOCS) <= linked


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for _, target in _links(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (page.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_linked_figure_is_in_its_report(page):
    assert figure_mismatches(page) == []


def test_a_figure_changed_on_one_side_fails(tmp_path):
    report = tmp_path / "report.md"
    report.write_text("| preset | 0.51-0.605 | +0.472 [+0.423, +0.521] |\n")
    page = tmp_path / "README.md"
    page.write_text("Held-out accuracy [0.51-0.605](report.md), gain [+0.472](report.md).\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert figure_mismatches(page) == []
        page.write_text("Held-out accuracy [0.51-0.61](report.md), gain [+0.472](report.md).\n")  # README side
        assert figure_mismatches(page) == ["README.md: [0.51-0.61](report.md): missing 0.61"]
        page.write_text("Held-out accuracy [0.51-0.605](report.md), gain [+0.472](report.md).\n")
        report.write_text("| preset | 0.51-0.605 | +0.470 [+0.423, +0.521] |\n")  # the report side
        assert figure_mismatches(page) == ["README.md: [+0.472](report.md): missing +0.472"]
    finally:
        ROOT = saved
