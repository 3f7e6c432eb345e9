"""Where the beam search tree's marks go (no plotly): rows, pruned folds, the visible area,
marker sizes and which labels fit. playground/plots/beam.py turns a `Drawing` into traces.

- x is the step. Every live leaf (a beam that finished or died, and the greedy path where it
  leaves the tree) gets its own row, best cumulative log-prob on top; a parent sits at the
  middle of its children (y = -row).
- Pruned candidates take no rows: per node they fold into one "+N pruned" mark in the gap under
  the node's lowest child, one step on (nothing else is drawn there), or on the node's own row
  when no child lived. Unfolded (or the best few per node, by choice), they take rows like
  leaves, after the node's live children.
- The fit area shows every mark inside the axis ranges with PAD_PX around the tree; a zoomed
  window shows part of it. Marker sizes follow the px per row and per step of the area shown,
  and "+N" marks are only drawn where rows are at least FOLD_MIN_ROW_PX apart.
- Labels: the most important first (the prompt, the returned hypotheses, the chosen node's
  path and subtree, unfolded candidates, the hypotheses' paths, the greedy path, the other live
  nodes by score, folds, pruned candidates), each where it fits (playground/plots/labels.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from playground.beam import PRUNED, ROOT, BeamNode, BeamTree
from playground.beam.tree import FATES
from playground.engine.tokens import read_pieces
from playground.messages import Message
from playground.plots.labels import Area, Label, place_labels
from playground.ui.i18n import DEFAULT, localize

# How a node reads in its hover and on the tree (said in the figure's language: Drawing.lang)
PROMPT_LABEL = Message("plot.beam.prompt", "prompt")
OFF_TREE = Message("plot.beam.off_tree", "greedy path, off the tree")

FONT_PX = 12  # node labels (pruned and fold labels one px smaller)
STAGE_SCALE = 1.4  # presenter mode: text this much larger (static/theme.js scales other figures so)
STAGE_MIN_HEIGHT = 200  # px: on stage the figure shrinks to the room below its top, not below this
ROOT_PX = 13.0  # the prompt's marker
STAR_PX = 18.0  # a returned hypothesis's star
ROW_PX = 30  # preferred px per row; taller trees squeeze into MAX_HEIGHT
MIN_HEIGHT, MAX_HEIGHT = 360, 600  # px of the whole figure (it fits a 720 px high window)
MIN_AREA_PX = 100.0  # the smallest plot area (inside the margins) a tree is drawn in
MARGIN = {"l": 10, "r": 80, "t": 44, "b": 76}  # px; r holds the colour bar, b the axis and legend
PAD_PX = {"left": 52, "right": 72, "top": 24, "bottom": 14}  # left: "prompt" left of the root
FOLD_MIN_ROW_PX = 9.0  # below this many px per row "+N pruned" marks are not drawn
NODE_POSITIONS = ("top center", "bottom center", "middle right", "top right", "bottom right", "middle left")
ROOT_POSITIONS = ("middle left", "top center", "bottom center", "middle right")
SIDE_POSITIONS = ("middle right", "top right", "bottom right", "top center", "bottom center")


@dataclass(frozen=True)
class PlotFrame:
    """The figure in the browser, as static/beam.js reports it. The defaults are Gradio's plot
    in a 1280 px wide window with MARGIN's margins, on a light page."""

    width: float = 1216.0  # the whole figure, px
    margin_x: float = MARGIN["l"] + MARGIN["r"]  # px left + right of the plot area
    margin_y: float = MARGIN["t"] + MARGIN["b"]  # px above + below it
    dark: bool = False  # the page is dark (light text)
    presenter: bool = False  # presenter mode: larger text, the figure ends above the window's bottom
    room: float = 0.0  # px from the figure's top to the window's bottom (0: unknown)

    @property
    def font_px(self) -> int:
        """Node labels' font size: FONT_PX, STAGE_SCALE times on stage."""
        return round(FONT_PX * STAGE_SCALE) if self.presenter else FONT_PX

    def height(self, rows: int) -> int:
        """px of the whole figure for `rows` rows: ROW_PX each within MIN/MAX_HEIGHT, and on stage
        no taller than the room below its top (static/theme.js fits other figures the same way)."""
        height = min(MAX_HEIGHT, max(MIN_HEIGHT, rows * ROW_PX + self.margin_y + PAD_PX["top"]))
        if self.presenter and self.room > 0:
            # never a plot area under MIN_AREA_PX (the legend's rows on stage take their share)
            height = max(STAGE_MIN_HEIGHT, self.margin_y + MIN_AREA_PX, min(height, self.room))
        return int(height)


@dataclass
class Point:
    """A drawn node: a tree node or a greedy token off the tree (id -step)."""

    id: int
    parent: int
    x: float
    label: str
    logprob: float
    cum: float
    score: float
    fate: str  # root, kept, pruned, finished or "greedy"
    detail: str
    y: float = 0.0


@dataclass
class Fold:
    """One parent's pruned candidates not drawn one by one ("+N pruned"), or once unfolded,
    the mark that folds them again."""

    parent: int
    x: float
    y: float
    hidden: list[BeamNode] = field(default_factory=list)  # best first
    unfolded: bool = False
    hidden_labels: list[str] = field(default_factory=list)  # their tokens as they read on their paths

    @property
    def label(self) -> str:
        if self.unfolded:
            return Message("plot.beam.fold", "fold")
        return Message("plot.beam.folded", "+{n} pruned", n=len(self.hidden))

    @property
    def short_label(self) -> str:
        return "-" if self.unfolded else f"+{len(self.hidden)}"


@dataclass
class Drawing:
    """Everything the traces need."""

    points: dict[int, Point]
    folds: list[Fold]  # every fold; drawn only when show_folds
    fit: Area  # the whole tree
    area: Area  # what is shown: fit, or the zoomed window
    height: int  # px of the whole figure
    node_px: float
    pruned_px: float
    show_folds: bool
    frame: PlotFrame = field(default_factory=PlotFrame)
    chosen: int | None = None
    labels: dict[object, tuple[str, str]] = field(default_factory=dict)  # key -> (position, text)
    lang: str = DEFAULT  # the language of its words

    @property
    def dark(self) -> bool:
        return self.frame.dark

    @property
    def font_px(self) -> int:
        return self.frame.font_px

    def marker_px(self, point: Point) -> float:
        if point.id == 0:
            return ROOT_PX
        return self.pruned_px if point.fate == PRUNED else self.node_px

    @property
    def fold_px(self) -> float:
        return self.pruned_px + 2

    def shown_folds(self) -> list[Fold]:
        return self.folds if self.show_folds else []

    def text(self, key: object) -> tuple[str, str]:
        """(text, position) of a placed label; ('', 'top center') where none fits."""
        position, text = self.labels.get(key, ("top center", ""))
        return text, position


def lay_out(
    tree: BeamTree,
    pruned_per_parent: int = 0,
    show_greedy: bool = True,
    unfolded: Iterable[int] = (),
    chosen: int | None = None,
    window: Sequence[float] | None = None,
    frame: PlotFrame | None = None,
    lang: str = DEFAULT,
) -> Drawing:
    """Positions, sizes and labels for the tree (see the module docstring), its words in lang."""
    frame = frame or PlotFrame()
    points = live_points(tree, show_greedy)
    add_pruned(tree, points, max(0, pruned_per_parent), set(unfolded))
    rows = layout_rows(points)
    folds = fold_marks(tree, points, set(unfolded))
    height = frame.height(rows)
    fit = fit_area(points, folds, frame, height)
    area = fit if window is None else Area(*(float(v) for v in window), fit.width, fit.height)
    row_px, step_px = area.px_per_y, area.px_per_x
    node_px = min(11.0, max(5.0, 0.8 * row_px), max(5.0, 0.6 * step_px))
    pruned_px = min(8.0, max(4.0, 0.6 * row_px))
    drawing = Drawing(points, folds, fit, area, height, node_px, pruned_px, row_px >= FOLD_MIN_ROW_PX, frame)
    drawing.chosen = chosen if chosen in points else None
    drawing.lang = lang
    drawing.labels = place(tree, drawing)
    return drawing


# --- rows ---------------------------------------------------------------------------------------


def _node_point(tree: BeamTree, node: BeamNode) -> Point:
    detail = Message(
        "plot.beam.detail",
        "{fate}{rank}{note}",
        fate=FATES.get(node.fate, node.fate),
        rank=Message("plot.beam.rank", ", rank {rank}", rank=node.rank) if node.rank else "",
        note=Message("plot.beam.note", " ({note})", note=node.note) if node.note else "",
    )
    label = (
        PROMPT_LABEL if node.fate == ROOT else tree.tree.label(node.id)
    )  # a byte piece names its character
    parent = -1 if node.parent is None else node.parent
    return Point(
        node.id, parent, node.step, label, node.logprob, node.cum_logprob, node.score, node.fate, detail
    )


def live_points(tree: BeamTree, show_greedy: bool) -> dict[int, Point]:
    """The root, every kept/finished node, and the greedy tokens (off the tree: id -step)."""
    points = {0: _node_point(tree, tree.nodes[0])}
    for node in tree.nodes[1:]:
        if node.fate != PRUNED:
            points[node.id] = _node_point(tree, node)
    parent, greedy = 0, (tree.greedy or []) if show_greedy else []
    labels = [read.visible for read in read_pieces([token.token for token in greedy])]  # '美 (byte 1/3)'
    for token, label in zip(greedy, labels, strict=True):
        if token.node_id is not None:  # on the tree (a pruned node there is drawn on its row)
            points.setdefault(token.node_id, _node_point(tree, tree.nodes[token.node_id]))
            parent = token.node_id
            continue
        score = token.cum_logprob / token.step**tree.settings.length_penalty
        points[-token.step] = Point(
            -token.step,
            parent,
            token.step,
            label,
            token.logprob,
            token.cum_logprob,
            score,
            "greedy",
            OFF_TREE,
        )
        parent = -token.step
    return points


def children_of(points: dict[int, Point]) -> dict[int, list[int]]:
    """Drawn children per point, in row order: live ones best cum log-prob first, then pruned
    candidates, greedy tokens last."""
    children: dict[int, list[int]] = {}
    for point in points.values():
        if point.id != 0:
            children.setdefault(point.parent, []).append(point.id)
    for ids in children.values():
        ids.sort(key=lambda i: (points[i].fate == "greedy", points[i].fate == PRUNED, -points[i].cum))
    return children


def layout_rows(points: dict[int, Point]) -> int:
    """Set y = -row: leaves take consecutive rows depth first, best first; a parent sits
    halfway between its first and last child. Returns the number of rows."""
    children = children_of(points)
    next_row = 0
    stack: list[tuple[int, bool]] = [(0, False)]
    while stack:  # iterative post-order: deep trees must not hit the recursion limit
        point_id, expanded = stack.pop()
        kids = children.get(point_id, [])
        if not kids:
            points[point_id].y, next_row = -next_row, next_row + 1
        elif expanded:
            points[point_id].y = (points[kids[0]].y + points[kids[-1]].y) / 2
        else:
            stack.append((point_id, True))
            stack.extend((kid, False) for kid in reversed(kids))
    return next_row


def _pruned_children(tree: BeamTree, points: dict[int, Point], parent: int) -> list[BeamNode]:
    """parent's pruned candidates, best first (one on the greedy path is drawn there already)."""
    return [tree.nodes[c] for c in tree.children(parent) if tree.nodes[c].fate == PRUNED and c not in points]


def add_pruned(tree: BeamTree, points: dict[int, Point], per_parent: int, unfolded: set[int]) -> None:
    """Add the drawn pruned candidates to points: the best per_parent of each node, all of an
    unfolded one's. They take rows like leaves (after the node's live children)."""
    for parent in [p for p in points.values() if p.id >= 0 and p.fate != PRUNED]:
        pruned = _pruned_children(tree, points, parent.id)
        for node in pruned if parent.id in unfolded else pruned[:per_parent]:
            points[node.id] = _node_point(tree, node)


def fold_marks(tree: BeamTree, points: dict[int, Point], unfolded: set[int]) -> list[Fold]:
    """One mark per node whose pruned candidates are not all drawn ("+N pruned"), or that was
    unfolded ("fold"): in the gap under its lowest drawn child, one step on, or on its own row
    when it has none (nothing else is drawn at either place)."""
    children = children_of(points)
    folds = []
    for parent in [p for p in points.values() if p.id >= 0 and p.fate != PRUNED]:
        hidden = _pruned_children(tree, points, parent.id)
        kids = children.get(parent.id, [])
        is_unfolded = parent.id in unfolded and any(points[k].fate == PRUNED for k in kids)
        if hidden or is_unfolded:
            slot = min(points[k].y for k in kids) - 0.5 if kids else parent.y
            labels = [tree.tree.label(node.id) for node in hidden]
            folds.append(Fold(parent.id, parent.x + 1, slot, hidden, not hidden, labels))
    return folds


def fit_area(points: dict[int, Point], folds: list[Fold], frame: PlotFrame, height: int) -> Area:
    """Axis ranges that show the whole tree inside the plot area, with PAD_PX around it."""
    width = max(frame.width - frame.margin_x, 100.0)
    plot_height = max(height - frame.margin_y, MIN_AREA_PX)
    xs = [p.x for p in points.values()] + [f.x for f in folds]
    ys = [p.y for p in points.values()] + [f.y for f in folds]
    px_x = (width - PAD_PX["left"] - PAD_PX["right"]) / max(max(xs) - min(xs), 1.0)
    px_y = (plot_height - PAD_PX["top"] - PAD_PX["bottom"]) / max(max(ys) - min(ys), 1.0)
    return Area(
        min(xs) - PAD_PX["left"] / px_x,
        max(xs) + PAD_PX["right"] / px_x,
        min(ys) - PAD_PX["bottom"] / px_y,
        max(ys) + PAD_PX["top"] / px_y,
        width,
        plot_height,
    )


# --- labels -------------------------------------------------------------------------------------


def _subtree(points: dict[int, Point], top: int) -> list[int]:
    """top and its drawn descendants, breadth first."""
    children = children_of(points)
    found, queue = [], [top]
    while queue:
        found += queue
        queue = [kid for i in queue for kid in children.get(i, [])]
    return found


def label_order(tree: BeamTree, drawing: Drawing) -> dict[int, tuple[float, float]]:
    """Sort key per point, most important smallest (see the module docstring)."""
    points, chosen = drawing.points, drawing.chosen
    order: dict[int, tuple[float, float]] = {0: (0, 0)}
    if chosen is not None:
        path = tree.tree.path(chosen) if chosen >= 0 else []
        for i in [*_subtree(points, chosen), *path]:
            order.setdefault(i, (1, points[i].x))
    unfolded = {f.parent for f in drawing.folds if f.unfolded}
    for point in points.values():
        if point.fate == PRUNED and point.parent in unfolded:
            order.setdefault(point.id, (2, -point.cum))
    for h in tree.hypotheses:
        for node_id in tree.tree.path(h.node_id)[1:]:
            order.setdefault(node_id, (3 + h.rank / 1000, points[node_id].x))
    greedy = {t.node_id for t in tree.greedy or [] if t.node_id is not None}
    for point in points.values():
        if point.fate == PRUNED:
            order.setdefault(point.id, (8, -point.cum))
        else:
            order.setdefault(
                point.id, (5 if point.fate == "greedy" or point.id in greedy else 6, -point.score)
            )
    return order


def wanted_labels(tree: BeamTree, drawing: Drawing) -> list[Label]:
    """Every label the figure could show, most important first."""
    points, order = drawing.points, label_order(tree, drawing)
    wanted: list[tuple[tuple[float, float], Label]] = []
    for p in points.values():
        font = drawing.font_px - 1 if p.fate == PRUNED else drawing.font_px
        where = ROOT_POSITIONS if p.id == 0 else NODE_POSITIONS
        text = localize(p.label, drawing.lang)
        label = Label(("node", p.id), p.id, text, p.x, p.y, drawing.marker_px(p), font, where)
        wanted.append((order[p.id], label))
    for h in tree.hypotheses:
        if h.node_id in points:
            p, text = points[h.node_id], f"#{h.rank} {h.score:.3f}"
            label = Label(("hyp", p.id), p.id, text, p.x, p.y, STAR_PX, drawing.font_px, SIDE_POSITIONS)
            wanted.append(((0.5, h.rank), label))
    for fold in drawing.shown_folds():
        for rank, text in (
            (7.0, localize(fold.label, drawing.lang)),
            (7.5, fold.short_label),
        ):  # the short text where the long won't fit
            key = ("fold", fold.parent)
            label = Label(
                key, key, text, fold.x, fold.y, drawing.fold_px, drawing.font_px - 1, SIDE_POSITIONS
            )
            wanted.append(((rank, -fold.y), label))
    wanted.sort(key=lambda item: item[0])
    return [label for _, label in wanted]


def markers(tree: BeamTree, drawing: Drawing) -> list[tuple[object, float, float, float]]:
    """(owner, x, y, size px) of every drawn marker inside the visible area (labels avoid them)."""
    area, points = drawing.area, drawing.points
    found: list[tuple[object, float, float, float]] = [
        (p.id, p.x, p.y, drawing.marker_px(p))
        for p in points.values()
        if area.x0 <= p.x <= area.x1 and area.y0 <= p.y <= area.y1
    ]
    found += [(("fold", f.parent), f.x, f.y, drawing.fold_px) for f in drawing.shown_folds()]
    found += [
        (h.node_id, points[h.node_id].x, points[h.node_id].y, STAR_PX)
        for h in tree.hypotheses
        if h.node_id in points
    ]
    return found


def place(tree: BeamTree, drawing: Drawing) -> dict[object, tuple[str, str]]:
    """The labels that fit in the visible area: {key: (position, text)}."""
    return place_labels(wanted_labels(tree, drawing), drawing.area, markers(tree, drawing))


# --- focus on a chosen node ---------------------------------------------------------------------

FOCUS_MIN_STEPS, FOCUS_MIN_ROWS = 8.0, 12.0  # the smallest window a click zooms to


def focus_window(drawing: Drawing, node: int) -> tuple[float, float, float, float] | None:
    """Where a click on `node` should zoom so that its subtree's labels fit: the box of the node
    and its drawn subtree (at least FOCUS_MIN_STEPS x FOCUS_MIN_ROWS, inside the whole tree).
    None when the view already labels the node and half of its subtree, or when the box would
    not be smaller than the view."""
    if node not in drawing.points:
        return None
    ids = _subtree(drawing.points, node)
    placed = [("node", i) in drawing.labels or ("hyp", i) in drawing.labels for i in ids]  # a star's counts
    if placed[0] and sum(placed) >= len(ids) / 2:
        return None
    xs = [drawing.points[i].x for i in ids]
    ys = [drawing.points[i].y for i in ids]
    fit, area = drawing.fit, drawing.area
    x0, x1 = _span(min(xs) - 1, max(xs) + 1, FOCUS_MIN_STEPS, fit.x0, fit.x1)
    y0, y1 = _span(min(ys) - 1, max(ys) + 1, FOCUS_MIN_ROWS, fit.y0, fit.y1)
    if (x1 - x0) * (y1 - y0) >= 0.8 * (area.x1 - area.x0) * (area.y1 - area.y0):
        return None
    return (x0, x1, y0, y1)


def _span(low: float, high: float, least: float, lowest: float, highest: float) -> tuple[float, float]:
    """[low, high] widened to at least `least` around its middle, moved inside [lowest, highest]."""
    if high - low < least:
        middle = (low + high) / 2
        low, high = middle - least / 2, middle + least / 2
    width = min(high - low, highest - lowest)
    low = min(max(low, lowest), highest - width)
    return low, low + width
