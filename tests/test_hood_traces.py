"""Under the hood runs saved as recorded traces and replayed with no model: the same figures,
tables and summaries as the live view."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest
from hood_tab_helpers import Hood

from playground.errors import PlaygroundError
from playground.traces import load_traces
from playground.ui.hood import VIEWS
from playground.ui.hood.prefill_decode import COLUMNS
from playground.ui.hood.record import PLOT_SLOTS, render_hood_trace
from playground.ui.i18n import ENGLISH

LESSONS = {view.key: (view.lesson.title, view.main) for view in VIEWS}


@pytest.fixture(scope="module")
def hood(tiny_lm):
    hood = Hood(tiny_lm)
    hood.tab.plot_labels = {"pd_throughput": "tokens per second"}
    return hood


def test_nothing_to_save_before_a_run(hood):
    with pytest.raises(PlaygroundError, match="Run this view first"):
        hood.trace("kv", session="fresh-tab")


def test_a_prefill_decode_run_replays_its_figures_table_and_summary(hood):
    live = hood.last("pd", [16, 64], 2)
    [trace] = load_traces(hood.trace("pd"))
    assert trace.kind == "hood" and trace.data["view"] == "pd" and trace.title.startswith("Prefill vs decode")
    shown = render_hood_trace(trace.data, LESSONS)
    assert shown["hood_summary"] == live["pd_summary"]
    assert shown["hood_status"] == f"**Prefill vs decode** · {live['pd_status']}"
    figure = shown[PLOT_SLOTS[0]]
    assert figure.label == "tokens per second"
    recorded = trace.data["outputs"]["figures"][0]["figure"]
    assert recorded["data"][0]["y"] == list(live["pd_throughput"].data[0].y)  # the measured numbers
    assert figure.value is not None and go.Figure(recorded).data == live["pd_throughput"].data
    table = shown["hood_table"]
    assert table.value["headers"] == [ENGLISH[key] for key in COLUMNS] and len(table.value["data"]) == 2
    assert [shown[slot].visible for slot in PLOT_SLOTS] == [True, True, False, False]


def test_a_trace_keeps_what_the_run_showed_before_its_last_update(hood):
    """The sampling-order lesson draws its main figure (both orders) early and its last update
    only redraws the draws: the trace still has that figure, and replay draws it first."""
    hood.last("order", "The capital of France is", False, 1.6, 0.8, 0, 40, "0")
    [trace] = load_traces(hood.trace("order"))
    assert [f["name"] for f in trace.data["outputs"]["figures"]] == ["order_orders", "order_hist", "order_tv"]
    hood.tab.plot_labels = {}
    shown = render_hood_trace(trace.data, LESSONS)
    assert shown[PLOT_SLOTS[0]].value is not None
    assert go.Figure(trace.data["outputs"]["figures"][0]["figure"]).data[0].type == "bar"


def test_replay_draws_the_main_visual_first_and_the_summary_last():
    """Laid out as the live lesson is on stage: an HTML main visual in its own slot, a main figure
    in the first plot slot (a row of its own), the other texts after the figures."""
    figures = [{"name": name, "label": name, "figure": go.Figure().to_dict()} for name in ("a", "main", "b")]
    texts = {"x_status": "Done: 3", "x_summary": "It worked.", "x_text": "<p>words</p>", "x_grid": "<table>"}
    data = {"view": "x", "outputs": {"figures": figures, "texts": texts, "tables": {}}}
    shown = render_hood_trace(data, {"x": ("A lesson", "main")})
    assert [shown[slot].label for slot in PLOT_SLOTS] == ["main", "a", "b", None]
    assert shown["hood_status"] == "**A lesson** · Done: 3" and shown["hood_summary"] == "It worked."
    assert shown["hood_html"] == "<p>words</p><table>" and shown["hood_main_html"].visible is False
    as_html = render_hood_trace(data, {"x": ("A lesson", "x_grid")})
    assert as_html["hood_main_html"].value == "<table>" and as_html["hood_main_html"].visible
    assert as_html["hood_html"] == "<p>words</p>" and as_html[PLOT_SLOTS[0]].label == "a"


def test_a_second_tab_saves_its_own_run(hood):
    mine = hood.last("kv", 16, 2)
    theirs = hood.last("kv", 24, 2, session="hood-trace-other")
    assert load_traces(hood.trace("kv"))[0].data["outputs"]["texts"]["kv_summary"] == mine["kv_summary"]
    saved = load_traces(hood.trace("kv", session="hood-trace-other"))[0]
    assert saved.data["outputs"]["texts"]["kv_summary"] == theirs["kv_summary"]
