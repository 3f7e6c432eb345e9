"""Which text labels of a scatter figure fit: pure geometry, no plotly.

A label is placed at the first of its allowed text positions (plotly's `textposition` words)
where its box lies inside the plot area and overlaps no label placed before it and no marker
but its own. Callers pass labels most important first, so what does not fit is the least
important. Widths are Arial's (Liberation Sans has the same metrics): figures that place
labels use FONT_FAMILY so that the estimate holds in every browser.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

FONT_FAMILY = "Arial, 'Liberation Sans', Helvetica, sans-serif"
# Arial advance widths of the printable ASCII characters (space to ~), in 1/1000 em.
_ARIAL = (
    "278 278 355 556 556 889 667 191 333 333 389 584 278 333 278 278 556 556 556 556 556 556 556 556 "
    "556 556 278 278 584 584 584 556 1015 667 667 722 722 667 611 778 722 278 500 667 556 833 722 778 "
    "667 778 722 667 611 722 667 944 667 667 611 278 278 278 469 556 333 556 556 500 556 556 278 556 "
    "556 222 222 500 222 833 556 556 556 556 333 500 278 556 500 722 500 500 500 334 260 334 584"
)
ASCII_WIDTHS = {chr(32 + i): int(w) / 1000 for i, w in enumerate(_ARIAL.split())}
OTHER_WIDTH = 1.0  # em for any other character (fallback fonts; ␣ and ↵ measure 0.64 and 0.84)
LINE_HEIGHT = 1.2  # em: a text box's height (Chromium: 14 px at 12 px)
SLACK_PX = 2.0  # kept between a label and anything else

Box = tuple[float, float, float, float]  # left, top, right, bottom in px, y down


def text_width(text: str, size: float) -> float:
    """Width in px of one line of text at font size `size` px (Arial metrics)."""
    return size * sum(ASCII_WIDTHS.get(ch, OTHER_WIDTH) for ch in text)


@dataclass(frozen=True)
class Area:
    """The plot area: `width` x `height` px showing data x0..x1 (left to right), y0..y1 (bottom to top)."""

    x0: float
    x1: float
    y0: float
    y1: float
    width: float
    height: float

    def to_px(self, x: float, y: float) -> tuple[float, float]:
        """Data coordinates to px from the area's top-left corner."""
        return (
            (x - self.x0) / (self.x1 - self.x0) * self.width,
            (self.y1 - y) / (self.y1 - self.y0) * self.height,
        )

    def near(self, x: float, y: float, px: float = 200.0) -> bool:
        """Whether (x, y) is within px of the area (a label there might still show)."""
        left, top = self.to_px(x, y)
        return -px <= left <= self.width + px and -px <= top <= self.height + px

    @property
    def px_per_x(self) -> float:
        return self.width / (self.x1 - self.x0)

    @property
    def px_per_y(self) -> float:
        return self.height / (self.y1 - self.y0)


@dataclass(frozen=True)
class Label:
    """A wanted label: `text` at data point (x, y) whose marker has diameter `marker` px.
    `owner` names the point: the label may cover that point's markers (a node and its star)."""

    key: object
    owner: object
    text: str
    x: float
    y: float
    marker: float
    size: float
    positions: Sequence[str]


def label_box(label: Label, position: str, area: Area) -> Box:
    """The box plotly draws `label`'s text in at `position` (its textPointPosition offsets)."""
    return _boxes(label, area, [position])[0]


def _boxes(label: Label, area: Area, positions: Sequence[str]) -> list[Box]:
    cx, cy = area.to_px(label.x, label.y)
    r = label.marker / 2 / 0.8 + 1  # plotly keeps text this far from the marker's centre
    w, h = text_width(label.text, label.size), LINE_HEIGHT * label.size
    boxes = []
    for position in positions:
        vertical, _, horizontal = position.partition(" ")
        left = {"left": cx - r - w, "center": cx - w / 2, "right": cx + r}[horizontal]
        top = {"top": cy - r - h, "middle": cy - h / 2, "bottom": cy + r}[vertical]
        boxes.append((left, top, left + w, top + h))
    return boxes


def marker_box(x: float, y: float, marker: float, area: Area) -> Box:
    cx, cy = area.to_px(x, y)
    return (cx - marker / 2, cy - marker / 2, cx + marker / 2, cy + marker / 2)


class _Grid:
    """Boxes bucketed by grid cell, for fast overlap tests."""

    def __init__(self, cell: float = 40.0) -> None:
        self.cell = cell
        self.cells: dict[tuple[int, int], list[tuple[Box, object]]] = {}

    def _keys(self, box: Box) -> Iterable[tuple[int, int]]:
        c = self.cell
        for i in range(int(box[0] // c), int(box[2] // c) + 1):
            for j in range(int(box[1] // c), int(box[3] // c) + 1):
                yield i, j

    def add(self, box: Box, owner: object) -> None:
        for key in self._keys(box):
            self.cells.setdefault(key, []).append((box, owner))

    def hits(self, box: Box, owner: object, slack: float) -> bool:
        for key in self._keys(box):
            for other, other_owner in self.cells.get(key, ()):
                if other_owner == owner and owner is not None:
                    continue
                if _overlap(box, other, slack):
                    return True
        return False


def _overlap(a: Box, b: Box, slack: float) -> bool:
    return a[0] < b[2] + slack and b[0] < a[2] + slack and a[1] < b[3] + slack and b[1] < a[3] + slack


def inside(box: Box, area: Area, slack: float = SLACK_PX) -> bool:
    return (
        box[0] >= slack and box[1] >= slack and box[2] <= area.width - slack and box[3] <= area.height - slack
    )


def place_labels(
    labels: Iterable[Label], area: Area, markers: Iterable[tuple[object, float, float, float]] = ()
) -> dict[object, tuple[str, str]]:
    """{label key: (text position, text)} for the labels that fit, most important (first) first;
    a key may come several times (shorter texts after longer ones): the first that fits wins.

    markers: (owner, x, y, diameter px) of the drawn markers; a label covers no marker but its
    owner's."""
    grid = _Grid()
    for owner, x, y, size in markers:
        grid.add(marker_box(x, y, size, area), ("marker", owner))
    placed: dict[object, tuple[str, str]] = {}
    for label in labels:
        if not label.text or label.key in placed or not area.near(label.x, label.y):
            continue
        for position, box in zip(label.positions, _boxes(label, area, label.positions), strict=True):
            if inside(box, area) and not grid.hits(box, ("marker", label.owner), SLACK_PX):
                grid.add(box, None)
                placed[label.key] = (position, label.text)
                break
    return placed
