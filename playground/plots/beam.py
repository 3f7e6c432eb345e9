"""Plotly figures from plain data (no model, no gradio): the beam search tree.

`beam_tree_figure(tree)` draws the tree left to right (x is the step) with the level of detail
that fits the figure's size: playground/plots/beam_layout.py decides where every mark goes,
which pruned candidates fold into a "+N pruned" mark and which labels fit; this module turns
that into traces. `beam_tree_data` gives the same figure as a plain dict (what the Beam tab
sends: building plotly objects for thousands of nodes costs more than the layout).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import plotly.graph_objects as go

from playground.beam import FINISHED, KEPT, PRUNED, BeamTree
from playground.engine.tokens import cut_off_shown
from playground.plots.beam_layout import (
    FONT_PX,
    MARGIN,
    ROOT_PX,
    STAR_PX,
    Drawing,
    Fold,
    PlotFrame,
    Point,
    focus_window,
    lay_out,
)
from playground.plots.labels import FONT_FAMILY
from playground.ui.i18n import DEFAULT, localize, t

__all__ = [
    "PlotFrame",
    "beam_tree_data",
    "beam_tree_figure",
    "early_stopping_word",
    "figure_config",
    "node_focus",
]

COLORSCALE = "Viridis"
PRUNED_COLOR = "rgba(150, 150, 150, 0.75)"
PRUNED_TEXT = "#8c8c8c"  # readable on light and dark backgrounds, like every colour here
EDGE_COLOR = "rgba(128, 128, 128, 0.85)"
GREEDY_COLOR = "#e4572e"
ROOT_COLOR = "#8c8c8c"
HYPOTHESIS_TEXT = "#b8860b"
CHOSEN_COLOR = "#2a7de1"
GRID_COLOR = "rgba(128, 128, 128, 0.18)"
TRANSPARENT = "rgba(0, 0, 0, 0)"  # the page's background shows through, light or dark
DARK_TEXT = "#e5e7eb"  # titles, labels and ticks on a dark page (plotly's default #444 on a light one)
# In the page each trace's group has class "trace<uid>" (e.g. ".tracefolds"), empty or not.
TRACE_UIDS = {
    "pruned edges": "pruned-edges",
    "beam edges": "beam-edges",
    "pruned": "pruned",
    "pruned, folded (click)": "folds",
    "kept (circle) / finished (square)": "nodes",
    "prompt": "prompt",
    "returned hypotheses": "hypotheses",
    "greedy path": "greedy",
    "greedy tokens off the tree": "greedy-off",
    "chosen node": "chosen",
}


def figure_config(image_format: str = "png") -> dict[str, Any]:
    """Plotly config: the wheel zooms (static/beam.js lets it only while the plot has focus); a
    double click fits the whole tree again (static/beam.js asks the server, which knows the fit,
    so plotly's own reset buttons go); the camera downloads PNG or SVG at twice the size."""
    if image_format not in ("png", "svg"):
        raise ValueError(f"image_format must be 'png' or 'svg', got {image_format!r}")
    return {
        "scrollZoom": True,
        "doubleClick": False,
        "displaylogo": False,
        "modeBarButtonsToRemove": ["autoScale2d", "resetScale2d", "select2d", "lasso2d"],
        "toImageButtonOptions": {"format": image_format, "filename": "beam-search-tree", "scale": 2},
    }


def beam_tree_figure(
    tree: BeamTree,
    pruned_per_parent: int = 0,
    show_greedy: bool = True,
    *,
    unfolded: Iterable[int] = (),
    chosen: int | None = None,
    window: Sequence[float] | None = None,
    frame: PlotFrame | None = None,
    lang: str = DEFAULT,
) -> go.Figure:
    """The beam search tree as a figure.

    Kept and finished nodes are coloured by their length-normalised score; the best
    pruned_per_parent pruned candidates of each node are drawn grey, the rest fold into one
    "+N pruned" mark (all are drawn for the nodes in `unfolded`); returned hypotheses are stars
    labelled with rank and final score; the greedy path is a dashed overlay (its tokens off the
    tree are open diamonds); `chosen` gets a ring, and its path and subtree are labelled first.
    window: the zoomed (x0, x1, y0, y1) to draw (None: the whole tree); frame: the figure's size
    in the browser. Only labels that fit are drawn; every node keeps its hover. Its words in lang.
    """
    view = {"unfolded": unfolded, "chosen": chosen, "window": window, "frame": frame, "lang": lang}
    return go.Figure(beam_tree_data(tree, pruned_per_parent, show_greedy, **view))


def beam_tree_data(
    tree: BeamTree,
    pruned_per_parent: int = 0,
    show_greedy: bool = True,
    *,
    unfolded: Iterable[int] = (),
    chosen: int | None = None,
    window: Sequence[float] | None = None,
    frame: PlotFrame | None = None,
    lang: str = DEFAULT,
) -> dict[str, Any]:
    """beam_tree_figure as a plain {"data": [...], "layout": {...}} dict."""
    d = lay_out(tree, pruned_per_parent, show_greedy, unfolded, chosen, window, frame, lang)
    traces = [*_edges(d), _pruned(d), _folds(d), _live(d), _root(d), _hypotheses(tree, d)]
    if show_greedy and tree.greedy:
        traces += _greedy(tree, d)
    if d.chosen is not None:
        traces.append(_chosen(d, d.points[d.chosen]))
    for trace in traces:  # its uid by its English name, then its name (the legend's) in lang
        uid = TRACE_UIDS[trace["name"]]
        trace.update(type="scatter", uid=uid, name=t(f"plot.beam.trace.{uid.replace('-', '_')}", lang))
    return {"data": traces, "layout": _layout(tree, d)}


def node_focus(
    tree: BeamTree,
    node: int,
    pruned_per_parent: int = 0,
    show_greedy: bool = True,
    *,
    unfolded: Iterable[int] = (),
    window: Sequence[float] | None = None,
    frame: PlotFrame | None = None,
    lang: str = DEFAULT,
) -> tuple[float, float, float, float] | None:
    """The window to zoom to when `node` is clicked so that its subtree's labels fit (None:
    stay, the view labels it already); see beam_layout.focus_window."""
    drawing = lay_out(tree, pruned_per_parent, show_greedy, unfolded, node, window, frame, lang)
    return focus_window(drawing, node)


# --- traces -------------------------------------------------------------------------------------


def _r(value: float) -> float:
    """Coordinates to 4 decimals: the payload is smaller, the picture the same."""
    return round(value, 4)


def _n(value: float) -> float:
    """Hover numbers to 6 decimals (they show 4): the same numbers on screen, a smaller payload."""
    return round(value, 6)


def _lines(segments: Iterable[tuple[Point | Fold, Point]]) -> dict[str, list[float | None]]:
    xs: list[float | None] = []
    ys: list[float | None] = []
    for start, end in segments:
        xs += [_r(start.x), _r(end.x), None]
        ys += [_r(start.y), _r(end.y), None]
    return {"x": xs, "y": ys}


def _edges(d: Drawing) -> list[dict[str, Any]]:
    points = d.points
    pruned = [(points[p.parent], p) for p in points.values() if p.fate == PRUNED and p.parent in points]
    folds = [(points[f.parent], f) for f in d.shown_folds()]
    beams = [
        (points[p.parent], p) for p in points.values() if p.fate in (KEPT, FINISHED) and p.parent in points
    ]
    common = {"mode": "lines", "hoverinfo": "skip", "showlegend": False}
    return [
        {
            "name": "pruned edges",
            **_lines([*pruned, *folds]),
            "line": {"color": PRUNED_COLOR, "width": 1},
            **common,
        },
        {"name": "beam edges", **_lines(beams), "line": {"color": EDGE_COLOR, "width": 1.6}, **common},
    ]


def _nodes(d: Drawing, points: list[Point], name: str, marker: dict[str, Any], font: dict[str, Any]) -> dict:
    """A markers+text trace of points: placed labels only, every point with its hover."""
    texts = [d.text(("node", p.id)) for p in points]
    return {
        "name": name,
        "x": [_r(p.x) for p in points],
        "y": [_r(p.y) for p in points],
        "mode": "markers+text",
        "text": [t for t, _ in texts],
        "textposition": [position for _, position in texts],
        "textfont": {"size": d.font_px, **font},
        "marker": marker,
        "customdata": [
            [
                localize(p.label, d.lang),
                _n(p.logprob),
                _n(p.cum),
                _n(p.score),
                localize(p.detail, d.lang),
                p.id,
            ]
            for p in points
        ],
        "hovertemplate": t("plot.beam.hover", d.lang),
    }


def _pruned(d: Drawing) -> dict[str, Any]:
    pruned = [p for p in d.points.values() if p.fate == PRUNED]
    marker = {"color": PRUNED_COLOR, "size": d.pruned_px}
    return _nodes(d, pruned, "pruned", marker, {"size": d.font_px - 1, "color": PRUNED_TEXT})


def _live(d: Drawing) -> dict[str, Any]:
    live = [p for p in d.points.values() if p.fate in (KEPT, FINISHED)]
    marker = {
        "color": [p.score for p in live],
        "colorscale": COLORSCALE,
        "size": d.node_px,
        "line": {"width": 1, "color": "rgba(0, 0, 0, 0.6)"},
        "symbol": ["square" if p.fate == FINISHED else "circle" for p in live],
        "colorbar": {"title": {"text": t("plot.beam.score", d.lang)}, "thickness": 10, "len": 0.8, "xpad": 6},
    }
    return _nodes(d, live, "kept (circle) / finished (square)", marker, {})


def _root(d: Drawing) -> dict[str, Any]:
    marker = {"color": ROOT_COLOR, "size": ROOT_PX, "symbol": "triangle-right"}
    return _nodes(d, [d.points[0]], "prompt", marker, {})


def _fold_hover(fold: Fold, parent: Point, lang: str) -> str:
    """The folded candidates with their true numbers, in lang."""
    after = localize(parent.label, lang)
    if fold.unfolded:
        return t("plot.beam.fold.hover_open", lang, after=after, id=parent.id)
    label = localize(fold.label, lang)
    lines = [t("plot.beam.fold.hover", lang, label=label, after=after, id=parent.id, step=fold.x)]
    labels = fold.hidden_labels or [n.label for n in fold.hidden]
    lines += [
        t("plot.beam.fold.line", lang, token=localize(text, lang), logprob=n.logprob, cum=n.cum_logprob)
        for n, text in zip(fold.hidden, labels, strict=True)
    ]
    return "<br>".join([*lines, t("plot.beam.fold.unfold", lang)])


def _folds(d: Drawing) -> dict[str, Any]:
    """The "+N pruned" marks (a plus; a minus once unfolded): click to unfold / fold."""
    folds = d.shown_folds()
    texts = [d.text(("fold", f.parent)) for f in folds]
    marker = {
        "symbol": ["line-ew-open" if f.unfolded else "cross-thin-open" for f in folds],
        "size": d.fold_px,
        "color": PRUNED_TEXT,
        "line": {"width": 2, "color": PRUNED_TEXT},
    }
    return {
        "name": "pruned, folded (click)",
        "x": [_r(f.x) for f in folds],
        "y": [_r(f.y) for f in folds],
        "mode": "markers+text",
        "text": [t for t, _ in texts],
        "textposition": [position for _, position in texts],
        "textfont": {"size": d.font_px - 1, "color": PRUNED_TEXT},
        "marker": marker,
        # [label, count, -, -, hover, parent id, "fold"]: static/beam.js sends "fold-<parent>" on a click
        "customdata": [
            [f.label, len(f.hidden), 0, 0, _fold_hover(f, d.points[f.parent], d.lang), f.parent, "fold"]
            for f in folds
        ],
        "hovertemplate": "%{customdata[4]}<extra></extra>",
    }


def _hypotheses(tree: BeamTree, d: Drawing) -> dict[str, Any]:
    """Stars on the returned hypotheses, labelled '#rank score' where it fits; a click chooses."""
    hyps = [h for h in tree.hypotheses if h.node_id in d.points]
    texts = [d.text(("hyp", h.node_id)) for h in hyps]
    marker = {"symbol": "star", "size": STAR_PX, "color": "gold", "line": {"width": 1, "color": "#8a6d00"}}
    return {
        "name": "returned hypotheses",
        "x": [_r(d.points[h.node_id].x) for h in hyps],
        "y": [_r(d.points[h.node_id].y) for h in hyps],
        "mode": "markers+text",
        "text": [t for t, _ in texts],
        "textposition": [position for _, position in texts],
        "textfont": {"size": d.font_px, "color": HYPOTHESIS_TEXT},
        "marker": marker,
        "customdata": [  # a character cut off at the end reads '…', not U+FFFD
            [cut_off_shown(h.text), h.score, h.cum_logprob, len(h.token_ids), h.rank, h.node_id] for h in hyps
        ],
        "hovertemplate": t("plot.beam.hypothesis", d.lang),
    }


def _greedy(tree: BeamTree, d: Drawing) -> list[dict[str, Any]]:
    """The greedy path: a dashed line from the prompt through its tokens; off-tree diamonds."""
    ids = [0] + [t.node_id if t.node_id is not None else -t.step for t in tree.greedy or []]
    path = [d.points[i] for i in ids if i in d.points]
    line = {
        "name": "greedy path",
        "x": [_r(p.x) for p in path],
        "y": [_r(p.y) for p in path],
        "mode": "lines",
        "hoverinfo": "skip",
        "line": {"color": GREEDY_COLOR, "width": 2.5, "dash": "dash"},
    }
    marker = {"symbol": "diamond-open", "size": d.node_px, "color": GREEDY_COLOR, "line": {"width": 2}}
    off = [p for p in path if p.fate == "greedy"]
    return [line, _nodes(d, off, "greedy tokens off the tree", marker, {"color": GREEDY_COLOR})]


def _chosen(d: Drawing, point: Point) -> dict[str, Any]:
    """A ring around the chosen node (what "Open in Step by step" opens)."""
    return {
        "name": "chosen node",
        "x": [_r(point.x)],
        "y": [_r(point.y)],
        "mode": "markers",
        "hoverinfo": "skip",
        "marker": {
            "symbol": "circle-open",
            "size": d.node_px + 9,
            "color": CHOSEN_COLOR,
            "line": {"width": 2.5},
        },
    }


# --- layout -------------------------------------------------------------------------------------


def early_stopping_word(value: bool | str) -> str:
    """The engine's early_stopping as the Beam tab's control words it: off / on / never."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _title(tree: BeamTree, lang: str = DEFAULT) -> str:
    s = tree.settings
    return t(
        "plot.beam.title",
        lang,
        beams=s.num_beams,
        steps=tree.steps_run,
        penalty=s.length_penalty,
        early=t(f"beam.early_stopping.{early_stopping_word(s.early_stopping)}", lang),
        reason=localize(tree.stop_reason, lang),
    )


def _layout(tree: BeamTree, d: Drawing) -> dict[str, Any]:
    """Transparent backgrounds (light and dark pages), fixed margins, the visible area's ranges,
    and in meta what static/beam.js compares with the browser's view (fit, window, plot size,
    dark page, presenter mode). On stage the text is larger here: meta.stage_sized tells
    static/theme.js to leave this figure's text and height alone (its labels were placed for them)."""
    area, fit, frame = d.area, d.fit, d.frame
    scale = d.font_px / FONT_PX
    last_step = int(max(p.x for p in d.points.values()))
    tick = next((t for t in (1, 2, 4, 5, 10, 20) if t * area.px_per_x >= 28), 50)  # every step when zoomed in
    legend = {
        "orientation": "h",
        "x": 0,
        "y": 0,
        "yref": "container",
        "yanchor": "bottom",
        "font": {"size": round(11 * scale)},
    }
    return {
        "title": {
            "text": _title(tree, d.lang),
            "x": 0.01,
            "xanchor": "left",
            "font": {"size": round(15 * min(scale, 1.2))},
        },
        "font": {"family": FONT_FAMILY, "size": d.font_px, **({"color": DARK_TEXT} if d.dark else {})},
        "height": d.height,
        "dragmode": "pan",
        "hovermode": "closest",
        "paper_bgcolor": TRANSPARENT,
        "plot_bgcolor": TRANSPARENT,
        "legend": legend,
        "margin": {**MARGIN, "autoexpand": True},
        "meta": {
            "stage_sized": True,
            "beam_view": {
                "dark": d.dark,
                "presenter": frame.presenter,
                "room": frame.room,
                "height": d.height,
                "fit": [fit.x0, fit.x1, fit.y0, fit.y1],
                "window": [area.x0, area.x1, area.y0, area.y1],
                "area": [area.width, area.height],
            },
        },
        "xaxis": {
            "title": {"text": t("plot.beam.step", d.lang), "standoff": 2},
            "range": [area.x0, area.x1],
            "tickvals": list(range(0, last_step + 1, tick)),  # none past the tree
            "gridcolor": GRID_COLOR,
            "zeroline": False,
        },
        "yaxis": {"visible": False, "range": [area.y0, area.y1]},
    }
