"""README.zh-CN.md, the README's first screen in Chinese, stays true to README.md: its two set-up
commands are README.md's, every other command it gives is one README.md gives, the model it names
is an embedded one, and its images and links point at files and headings that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
README_ZH = REPO / "README.zh-CN.md"
SETUP_HEADINGS = {README: "Two commands", README_ZH: "两条命令"}  # the section of the two commands
CODE_BLOCK = re.compile(r"^\s*```bash\n(.*?)^\s*```", re.M | re.S)
LINK = re.compile(r"(!?)\[[^\]]*\]\(([^)\s]+)\)")


def section(path: Path, heading: str) -> str:
    """The text under `## heading` up to the next heading of that level."""
    text = path.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"{path.name} has no section '## {heading}'"
    return match.group(1)


def commands(text: str) -> list[str]:
    """The command lines of the ```bash blocks of a Markdown text, in order."""
    lines = [line.strip() for block in CODE_BLOCK.findall(text) for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def links(path: Path) -> list[tuple[bool, str]]:
    """(is an image, target) of every Markdown link of a file."""
    return [(bang == "!", target) for bang, target in LINK.findall(path.read_text(encoding="utf-8"))]


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (lower case, punctuation dropped)."""
    headings = re.findall(r"^#{1,6} (.+)$", path.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_the_two_setup_commands_are_the_readmes():
    english = commands(section(README, SETUP_HEADINGS[README]))
    assert english == ["./run.sh", "./test.sh"]  # what README.md's first screen tells a newcomer
    assert commands(section(README_ZH, SETUP_HEADINGS[README_ZH])) == english


def test_every_command_of_the_chinese_readme_is_one_readme_gives():
    english = README.read_text(encoding="utf-8")
    for command in commands(README_ZH.read_text(encoding="utf-8")):
        assert f"`{command}`" in english or command in commands(english), command


def test_the_second_model_it_names_is_embedded():
    from playground.engine.embedded import DEFAULT_EMBEDDED, EMBEDDED_MODELS

    named = re.findall(r"--model (\S+)", " ".join(commands(README_ZH.read_text(encoding="utf-8"))))
    assert named == ["gemma-3-270m"]
    assert set(named) <= set(EMBEDDED_MODELS) and DEFAULT_EMBEDDED not in named


@pytest.mark.parametrize("path", [README, README_ZH], ids=lambda path: path.name)
def test_images_and_links_point_at_what_exists(path: Path):
    for _, target in links(path):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        linked = REPO / file if file else path
        assert linked.is_file(), f"{path.name} links {target}: no such file"
        if anchor:
            assert anchor in anchors(linked), f"{path.name} links {target}: no such heading"


def test_each_readme_links_the_other_and_shows_the_chinese_screenshot():
    for path, other in ((README, README_ZH), (README_ZH, README)):
        targets = {target for _, target in links(path)}
        assert other.name in targets, f"{path.name} does not link {other.name}"
        assert (True, "docs/zh.png") in links(path), f"{path.name} does not show docs/zh.png"
    assert (REPO / "docs" / "zh.png").stat().st_size < 400_000  # a README image, not a download
