"""The code stays easy to change: no module under playground/ grows past 500 lines."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "playground"
MAX_LINES = 500


def test_no_module_is_over_500_lines():
    sizes = {
        p.relative_to(PACKAGE.parent): len(p.read_text(encoding="utf-8").splitlines())
        for p in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 50  # the package was found
    assert {str(p): n for p, n in sizes.items() if n > MAX_LINES} == {}
