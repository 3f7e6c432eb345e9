"""Plotly figures from plain data (no model, no gradio): the beam search tree.

`beam_tree_figure(tree)` lays the tree out left to right: x is the step, every leaf gets its
own row (best cumulative log-prob on top), a parent sits at the middle of its children.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from playground.beam import FINISHED, KEPT, PRUNED, ROOT, BeamNode, BeamTree

COLORSCALE = "Viridis"
PRUNED_COLOR = "rgba(150, 150, 150, 0.55)"
EDGE_COLOR = "rgba(90, 90, 90, 0.8)"
GREEDY_COLOR = "#e4572e"
ROW_PX = 16  # vertical pixels per leaf row before zooming
HOVER = (
    "<b>%{customdata[0]}</b> (node #%{customdata[5]})<br>step %{x}<br>"
    "log-prob %{customdata[1]:.4f}<br>cum log-prob %{customdata[2]:.4f}<br>"
    "normalised score %{customdata[3]:.4f}<br>%{customdata[4]}<extra></extra>"
)


@dataclass
class _Point:
    """A drawn node: a tree node or a greedy token off the tree (id < 0)."""

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


def figure_config(image_format: str = "png") -> dict[str, Any]:
    """Plotly config for the modebar: zoom with the wheel, download as PNG or SVG."""
    if image_format not in ("png", "svg"):
        raise ValueError(f"image_format must be 'png' or 'svg', got {image_format!r}")
    return {
        "scrollZoom": True,
        "displaylogo": False,
        "toImageButtonOptions": {"format": image_format, "filename": "beam-search-tree", "scale": 2},
    }


def beam_tree_figure(tree: BeamTree, pruned_per_parent: int = 2, show_greedy: bool = True) -> go.Figure:
    """The beam search tree as a figure.

    Kept and finished nodes are coloured by their length-normalised score; up to
    pruned_per_parent pruned candidates per expanded node (best first) are drawn grey;
    returned hypotheses are stars labelled with rank and final score; the greedy path is a
    dashed overlay (its tokens off the tree are drawn as open diamonds).
    """
    points = _visible_points(tree, pruned_per_parent, show_greedy)
    _layout_rows(points)
    fig = go.Figure()
    _add_edges(fig, points)
    _add_nodes(fig, points)
    _add_hypotheses(fig, tree, points)
    if show_greedy and tree.greedy:
        _add_greedy(fig, tree, points)
    _style(fig, tree, points)
    return fig


def _node_point(node: BeamNode) -> _Point:
    detail = (
        node.fate + (f", rank {node.rank}" if node.rank else "") + (f" ({node.note})" if node.note else "")
    )
    label = "prompt" if node.fate == ROOT else node.label
    return _Point(
        node.id,
        -1 if node.parent is None else node.parent,
        node.step,
        label,
        node.logprob,
        node.cum_logprob,
        node.score,
        node.fate,
        detail,
    )


def _visible_points(tree: BeamTree, pruned_per_parent: int, show_greedy: bool) -> dict[int, _Point]:
    """Every kept/finished node, the best pruned children of each node, greedy tokens off the tree."""
    points = {0: _node_point(tree.nodes[0])}
    for node in tree.nodes[1:]:
        if node.fate != PRUNED:
            points[node.id] = _node_point(node)
    for parent in [0] + [n.id for n in tree.nodes if n.fate == KEPT]:
        pruned = [c for c in tree.children(parent) if tree.nodes[c].fate == PRUNED]
        for child in pruned[: max(0, pruned_per_parent)]:
            points[child] = _node_point(tree.nodes[child])
    if show_greedy and tree.greedy:
        parent = 0
        for token in tree.greedy:
            if token.node_id is not None:
                points.setdefault(token.node_id, _node_point(tree.nodes[token.node_id]))
                parent = token.node_id
                continue
            point_id = -token.step
            points[point_id] = _Point(
                point_id,
                parent,
                token.step,
                token.label,
                token.logprob,
                token.cum_logprob,
                token.cum_logprob / token.step**tree.settings.length_penalty,
                "greedy",
                "greedy path, off the tree",
            )
            parent = point_id
    return points


def _layout_rows(points: dict[int, _Point]) -> None:
    """y = -row: leaves take consecutive rows in depth-first order, best cum log-prob first;
    a parent sits halfway between its first and last child."""
    children: dict[int, list[int]] = {}
    for point in points.values():
        if point.id != 0:
            children.setdefault(point.parent, []).append(point.id)
    for ids in children.values():
        ids.sort(key=lambda i: (points[i].fate == "greedy", -points[i].cum))
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


def _edges(points: dict[int, _Point], keep: set[str]) -> tuple[list[float | None], list[float | None]]:
    xs: list[float | None] = []
    ys: list[float | None] = []
    for point in points.values():
        if point.id != 0 and point.fate in keep and point.parent in points:
            parent = points[point.parent]
            xs += [parent.x, point.x, None]
            ys += [parent.y, point.y, None]
    return xs, ys


def _add_edges(fig: go.Figure, points: dict[int, _Point]) -> None:
    for name, fates, line in (
        ("pruned edges", {PRUNED}, {"color": PRUNED_COLOR, "width": 1}),
        ("beam edges", {KEPT, FINISHED}, {"color": EDGE_COLOR, "width": 1.6}),
    ):
        xs, ys = _edges(points, fates)
        fig.add_trace(
            go.Scatter(x=xs, y=ys, mode="lines", name=name, hoverinfo="skip", line=line, showlegend=False)
        )


def _scatter(
    points: list[_Point], name: str, marker: dict[str, Any], text_color: str | None = None
) -> go.Scatter:
    return go.Scatter(
        x=[p.x for p in points],
        y=[p.y for p in points],
        mode="markers+text",
        name=name,
        text=[p.label for p in points],
        textposition="top center",
        textfont={"size": 11, **({"color": text_color} if text_color else {})},
        marker=marker,
        customdata=[[p.label, p.logprob, p.cum, p.score, p.detail, p.id] for p in points],
        hovertemplate=HOVER,
    )


def _add_nodes(fig: go.Figure, points: dict[int, _Point]) -> None:
    pruned = [p for p in points.values() if p.fate == PRUNED]
    fig.add_trace(_scatter(pruned, "pruned", {"color": PRUNED_COLOR, "size": 7}, text_color="#999999"))
    live = [p for p in points.values() if p.fate in (KEPT, FINISHED)]
    scores = [p.score for p in live]
    marker = {
        "color": scores,
        "colorscale": COLORSCALE,
        "size": 11,
        "line": {"width": 1, "color": "#333333"},
        "symbol": ["square" if p.fate == FINISHED else "circle" for p in live],
        "colorbar": {"title": {"text": "score"}, "thickness": 12},
    }
    fig.add_trace(_scatter(live, "kept (circle) / finished (square)", marker))
    root = points[0]
    fig.add_trace(_scatter([root], "prompt", {"color": "#333333", "size": 13, "symbol": "triangle-right"}))


def _add_hypotheses(fig: go.Figure, tree: BeamTree, points: dict[int, _Point]) -> None:
    """Stars on the returned hypotheses, labelled '#rank score'."""
    hyps = [h for h in tree.hypotheses if h.node_id in points]
    fig.add_trace(
        go.Scatter(
            x=[points[h.node_id].x for h in hyps],
            y=[points[h.node_id].y for h in hyps],
            mode="markers+text",
            name="returned hypotheses",
            text=[f"#{h.rank} {h.score:.3f}" for h in hyps],
            textposition="middle right",
            textfont={"size": 12, "color": "#b8860b"},
            marker={"symbol": "star", "size": 18, "color": "gold", "line": {"width": 1, "color": "#8a6d00"}},
            customdata=[[h.text, h.score, h.cum_logprob, len(h.token_ids)] for h in hyps],
            hovertemplate="<b>hypothesis</b> %{text}<br>%{customdata[0]}<br>cum log-prob %{customdata[2]:.4f}"
            "<br>%{customdata[3]} tokens<extra></extra>",
        )
    )


def _add_greedy(fig: go.Figure, tree: BeamTree, points: dict[int, _Point]) -> None:
    """The greedy path: a dashed line from the prompt through its tokens."""
    ids = [0] + [t.node_id if t.node_id is not None else -t.step for t in tree.greedy or []]
    path = [points[i] for i in ids if i in points]
    line = {"color": GREEDY_COLOR, "width": 2.5, "dash": "dash"}
    xs, ys = [p.x for p in path], [p.y for p in path]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="greedy path", hoverinfo="skip", line=line))
    off = [p for p in path if p.fate == "greedy"]
    marker = {"symbol": "diamond-open", "size": 10, "color": GREEDY_COLOR, "line": {"width": 2}}
    fig.add_trace(_scatter(off, "greedy tokens off the tree", marker, text_color=GREEDY_COLOR))


def early_stopping_word(value: bool | str) -> str:
    """The engine's early_stopping as the Beam tab's control words it: off / on / never."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _style(fig: go.Figure, tree: BeamTree, points: dict[int, _Point]) -> None:
    rows = 1 - min(p.y for p in points.values())
    s = tree.settings
    fig.update_layout(
        title={
            "text": f"Beam search: {s.num_beams} beams, {tree.steps_run} steps, length penalty "
            f"{s.length_penalty:g}, early stopping {early_stopping_word(s.early_stopping)} "
            f"({tree.stop_reason})"
        },
        height=int(min(max(480, rows * ROW_PX), 1600)),
        dragmode="pan",
        hovermode="closest",
        plot_bgcolor="white",
        legend={"orientation": "h", "y": -0.08},
        margin={"l": 20, "r": 20, "t": 60, "b": 40},
        uirevision="beam-tree",
    )
    fig.update_xaxes(title_text="step", dtick=1, range=[-0.5, tree.steps_run + 1.8], gridcolor="#eeeeee")
    fig.update_yaxes(visible=False, range=[-rows + 0.2, 1.0])
