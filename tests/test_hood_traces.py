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

TITLES = {view.key: view.lesson.title for view in VIEWS}


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
    shown = render_hood_trace(trace.data, TITLES)
    assert live["pd_summary"] in shown["hood_summary"] and "**Prefill vs decode**" in shown["hood_summary"]
    figure = shown[PLOT_SLOTS[0]]
    assert figure.label == "tokens per second"
    recorded = trace.data["outputs"]["figures"][0]["figure"]
    assert recorded["data"][0]["y"] == list(live["pd_throughput"].data[0].y)  # the measured numbers
    assert figure.value is not None and go.Figure(recorded).data == live["pd_throughput"].data
    table = shown["hood_table"]
    assert table.value["headers"] == [ENGLISH[key] for key in COLUMNS] and len(table.value["data"]) == 2
    assert [shown[slot].visible for slot in PLOT_SLOTS] == [True, True, False, False]


def test_a_second_tab_saves_its_own_run(hood):
    mine = hood.last("kv", 16, 2)
    theirs = hood.last("kv", 24, 2, session="hood-trace-other")
    assert load_traces(hood.trace("kv"))[0].data["outputs"]["texts"]["kv_summary"] == mine["kv_summary"]
    saved = load_traces(hood.trace("kv", session="hood-trace-other"))[0]
    assert saved.data["outputs"]["texts"]["kv_summary"] == theirs["kv_summary"]
