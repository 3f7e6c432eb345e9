"""Under the hood runs saved as recorded traces and replayed with no model: the same figures,
tables and summaries as the live view."""

from __future__ import annotations

from types import SimpleNamespace

import plotly.graph_objects as go
import pytest

from playground.errors import PlaygroundError
from playground.settings import load_settings
from playground.traces import load_traces
from playground.ui.hood_record import PLOT_SLOTS, render_hood_trace
from playground.ui.hood_tab import PD_COLUMNS, HoodHandlers
from playground.workspace import Workspaces

TAB = SimpleNamespace(session_hash="hood-trace-tab")


@pytest.fixture(scope="module")
def hood(tiny_lm):
    handlers = HoodHandlers(tiny_lm, load_settings(), Workspaces(tiny_lm))
    handlers.plot_labels = {"pd_throughput": "tokens per second"}
    return handlers


def test_nothing_to_save_before_a_run(hood):
    with pytest.raises(PlaygroundError, match="Run this view first"):
        hood.hood_trace("kv", SimpleNamespace(session_hash="fresh-tab"))


def test_a_prefill_decode_run_replays_its_figures_table_and_summary(hood):
    *_, live = hood.hood_prefill([16, 64], 2, TAB)
    [trace] = load_traces(hood.hood_trace("pd", TAB))
    assert trace.kind == "hood" and trace.data["view"] == "pd" and trace.title.startswith("Prefill vs decode")
    shown = render_hood_trace(trace.data)
    assert live["pd_summary"] in shown["hood_summary"]
    figure = shown[PLOT_SLOTS[0]]
    assert figure.label == "tokens per second"
    recorded = trace.data["outputs"]["figures"][0]["figure"]
    assert recorded["data"][0]["y"] == list(live["pd_throughput"].data[0].y)  # the measured numbers
    assert figure.value is not None and go.Figure(recorded).data == live["pd_throughput"].data
    table = shown["hood_table"]
    assert table.value["headers"] == PD_COLUMNS and len(table.value["data"]) == 2
    assert [shown[slot].visible for slot in PLOT_SLOTS] == [True, True, False, False]


def test_a_second_tab_saves_its_own_run(hood):
    other = SimpleNamespace(session_hash="hood-trace-other")
    *_, mine = hood.hood_kv(16, 2, TAB)
    *_, theirs = hood.hood_kv(24, 2, other)
    assert (
        load_traces(hood.hood_trace("kv", TAB))[0].data["outputs"]["texts"]["kv_summary"]
        == mine["kv_summary"]
    )
    assert (
        load_traces(hood.hood_trace("kv", other))[0].data["outputs"]["texts"]["kv_summary"]
        == theirs["kv_summary"]
    )
