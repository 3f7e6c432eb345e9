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

from playground.ui.i18n import DEFAULT, localize_recorded, recorded_text

MAX_PLOTS = 4  # no view draws more figures than this
PLOT_SLOTS = [f"hood_plot_{i}" for i in range(MAX_PLOTS)]
REPLAY_OUTPUTS = ["hood_status", "hood_main_html", *PLOT_SLOTS, "hood_html", "hood_table", "hood_summary"]
MARKDOWN = ("_status", "_summary")  # the texts drawn as Markdown lines; the others are HTML


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


def render_hood_trace(
    data: dict[str, Any], lessons: dict[str, tuple[str, str]], lang: str = DEFAULT
) -> dict[str, Any]:
    """A recorded run drawn into the replay tab's generic slots, laid out as the live lesson is on
    stage: its title and status line, its main visual (lessons: view key -> (title, main
    component's name)), the other figures, texts and table, the summary last. Figures recorded in
    English show their static texts in lang."""
    title, main = lessons.get(data["view"], (data["view"], ""))
    texts: dict[str, str] = {name: text for name, text in data["outputs"]["texts"].items() if text}
    status = next((text for name, text in texts.items() if name.endswith("_status")), "")
    summaries = [text for name, text in texts.items() if name.endswith("_summary")]
    others = [text for name, text in texts.items() if name != main and not name.endswith(MARKDOWN)]
    views: dict[str, Any] = {
        "hood_status": f"**{title}** · {status}" if status else f"**{title}**",
        "hood_main_html": gr.HTML(texts.get(main, ""), visible=main in texts),
        "hood_html": "".join(others),
        "hood_summary": "\n\n".join(summaries),
    }
    views.update(_figure_slots(data["outputs"]["figures"], main, lang))
    tables = list(data["outputs"]["tables"].values())
    if tables:
        table = tables[0]
        views["hood_table"] = gr.Dataframe({"headers": table["headers"], "data": table["rows"]}, visible=True)
    else:
        views["hood_table"] = gr.Dataframe(visible=False)
    return views


def _figure_slots(figures: list[dict[str, Any]], main: str, lang: str) -> dict[str, Any]:
    """The recorded figures in the plot slots, the main one first (the first slot has a row of its
    own), the slots left over hidden."""
    ordered = sorted(figures, key=lambda recorded: recorded["name"] != main)[:MAX_PLOTS]
    views: dict[str, Any] = {}
    for slot, recorded in zip(PLOT_SLOTS, ordered, strict=False):
        label = recorded_text(recorded["label"], lang) if recorded["label"] else None
        figure = go.Figure(localize_recorded(recorded["figure"], lang))
        views[slot] = gr.Plot(figure, label=label, show_label=bool(label), visible=True)
    for slot in PLOT_SLOTS[len(ordered) :]:
        views[slot] = gr.Plot(None, visible=False)
    return views
