"""Recorded "Under the hood" runs: what a view showed at the end of a run, as plain JSON.

A hood run's numbers live in its figures, tables and summaries (the view's modules return plain
results; the tab renders them). A trace keeps those rendered values: each figure as plotly JSON,
each table with its column headers, each summary as its text. Replaying draws them into generic
slots (summary, text, figures, table) with no model loaded.
"""

from __future__ import annotations

import json
from typing import Any

import gradio as gr
import plotly.graph_objects as go

MAX_PLOTS = 4  # no view draws more figures than this
PLOT_SLOTS = [f"hood_plot_{i}" for i in range(MAX_PLOTS)]
REPLAY_OUTPUTS = ["hood_summary", "hood_html", *PLOT_SLOTS, "hood_table"]


def record_views(views: dict[str, Any], labels: dict[str, str], headers: dict[str, list[str]]) -> dict:
    """The JSON form of a view's outputs: figures (with their labels), tables (with their headers),
    texts. Widget updates (sliders, dropdowns, tabs) are what the view was steered with, not what it
    showed, and are left out."""
    recorded: dict[str, Any] = {"figures": [], "texts": {}, "tables": {}}
    for name, value in views.items():
        if isinstance(value, go.Figure):
            figure = json.loads(value.to_json())
            recorded["figures"].append({"name": name, "label": labels.get(name, ""), "figure": figure})
        elif isinstance(value, str):
            recorded["texts"][name] = value
        elif isinstance(value, list) and name in headers:
            recorded["tables"][name] = {"headers": headers[name], "rows": value}
    return recorded


def render_hood_trace(data: dict[str, Any], titles: dict[str, str]) -> dict[str, Any]:
    """A recorded run drawn into the replay tab's generic slots (titles: view key -> lesson title)."""
    texts: dict[str, str] = data["outputs"]["texts"]
    markdown = [texts[name] for name in texts if name.endswith(("_status", "_summary")) and texts[name]]
    html = [texts[name] for name in texts if not name.endswith(("_status", "_summary")) and texts[name]]
    views: dict[str, Any] = {
        "hood_summary": f"**{titles.get(data['view'], data['view'])}**\n\n" + "\n\n".join(markdown),
        "hood_html": "".join(html),
    }
    figures = data["outputs"]["figures"][:MAX_PLOTS]
    for slot, recorded in zip(PLOT_SLOTS, figures, strict=False):
        label = recorded["label"] or None
        views[slot] = gr.Plot(
            go.Figure(recorded["figure"]), label=label, show_label=bool(label), visible=True
        )
    for slot in PLOT_SLOTS[len(figures) :]:
        views[slot] = gr.Plot(None, visible=False)
    tables = list(data["outputs"]["tables"].values())
    if tables:
        table = tables[0]
        views["hood_table"] = gr.Dataframe({"headers": table["headers"], "data": table["rows"]}, visible=True)
    else:
        views["hood_table"] = gr.Dataframe(visible=False)
    return views
