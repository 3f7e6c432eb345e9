"""The lesson registry: every lesson of playground.hood has a view, an API endpoint, a trace that
replays and a browser run, and nothing is registered half-way."""

from __future__ import annotations

import importlib
import inspect

import gradio as gr
import pytest
import test_hood_browser
from hood_tab_helpers import Hood

from playground import hood
from playground.traces import load_traces
from playground.ui.hood import VIEWS, build_hood_tab
from playground.ui.hood.record import PLOT_SLOTS, render_hood_trace
from playground.ui.hood.tab import run_inputs, run_values, said
from playground.ui.state import TabStates
from playground.workspace import Workspaces


@pytest.fixture(scope="module")
def built(tiny_lm):
    with gr.Blocks():
        widgets, tab = build_hood_tab(tiny_lm, Workspaces(tiny_lm), TabStates(), VIEWS)
    return widgets, tab


def test_every_lesson_has_exactly_one_view_and_the_other_way_round():
    assert [view.lesson for view in VIEWS] == list(hood.LESSONS)
    assert len({view.key for view in VIEWS}) == len(VIEWS)
    for lesson in hood.LESSONS:
        module = importlib.import_module(f"playground.hood.{lesson.name}")
        assert module.LESSON is lesson and inspect.isgeneratorfunction(lesson.run)


def test_every_lesson_follows_the_one_naming_rule():
    """playground.hood.<name> is the lesson's module (no function shadows it), with run and iter_run."""
    for lesson in hood.LESSONS:
        module = importlib.import_module(f"playground.hood.{lesson.name}")
        assert getattr(hood, lesson.name) is module, lesson.name
        assert lesson.run is module.iter_run and inspect.isgeneratorfunction(module.iter_run)
        assert callable(module.run) and not inspect.isgeneratorfunction(module.run)


@pytest.mark.parametrize("view", VIEWS, ids=lambda view: view.key)
def test_each_view_is_complete(built, view):
    widgets, _ = built
    assert view.main in view.outputs and set(view.quick) <= set(run_inputs(view))
    for name in [*run_inputs(view), *view.all_outputs]:
        assert name in widgets, f"{view.key}: no component {name!r}"
    assert view.explain and view.label and view.run_label


@pytest.mark.parametrize("view", VIEWS, ids=lambda view: view.key)
def test_each_lesson_runs_and_its_trace_replays(tiny_lm, built, view):
    """A quick run's trace replays titled by its lesson, its main visual first (as on stage)."""
    widgets, tab = built
    lessons = Hood(tiny_lm)
    lessons.tab.plot_labels = tab.plot_labels
    shown = lessons.last(view.key, *run_values(view, widgets, quick=True))
    assert shown[f"{view.key}_status"].startswith("Done")
    [trace] = load_traces(lessons.trace(view.key))
    drawn = render_hood_trace(trace.data, {view.key: (view.lesson.title, view.main)})
    assert drawn["hood_status"].startswith(f"**{view.lesson.title}** · Done")
    if isinstance(widgets[view.main], gr.Plot):
        assert drawn[PLOT_SLOTS[0]].label == said(widgets[view.main].label, "en")  # saved in English here
    else:
        assert drawn["hood_main_html"].visible and drawn["hood_main_html"].value


def test_each_lesson_has_an_api_endpoint_named_after_it(app_client):
    endpoints = app_client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    for view in VIEWS:
        parameters = [p["parameter_name"] for p in endpoints[f"/hood_{view.lesson.name}"]["parameters"]]
        assert parameters == run_inputs(view)
        assert f"/hood_{view.key}_trace" in endpoints


def test_each_lesson_runs_in_the_browser_test():
    marks = test_hood_browser.test_every_lesson_runs_on_stage.pytestmark
    parametrize = next(mark for mark in marks if mark.name == "parametrize")
    assert list(parametrize.args[1]) == list(VIEWS)
