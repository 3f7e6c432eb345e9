"""Shared links in the app: a page opened with a link shows what it asks for (a bad link is told as
a toast), and "Copy link" makes a link to the current tab's state, Under the hood's to the lesson
on screen with its inputs. The links themselves (parameters, reading, checking) are ui/links.py."""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.ui.beam_tab import RUN_OUTPUTS
from playground.ui.chat_tab import ANSWER_OUTPUTS, CONTROLS
from playground.ui.common import connect, friendly_errors
from playground.ui.compare import LINK_OUTPUTS as COMPARE_LINK_OUTPUTS
from playground.ui.hood import VIEWS
from playground.ui.hood.tab import link_outputs, link_params, link_values, opened_from_link, run_inputs
from playground.ui.i18n import session_lang
from playground.ui.kv_tab import CALCULATOR_INPUTS, CALCULATOR_OUTPUTS
from playground.ui.links import LinkRules, link_rules, link_to, make_query, warn_bad_link
from playground.ui.step_tab import SETTINGS_INPUTS, VIEW_OUTPUTS

# The selected tab's id, read in the browser when "Copy link" is pressed (its name is translated); on
# Under the hood, with the id of the lesson's sub-tab shown ("hood:hood-lens").
CURRENT_TAB_JS = """(tab, ...rest) => {
  const selected = document.querySelector("#main-tabs [role=tab][aria-selected=true]")?.dataset.tabId;
  const lesson = [...document.querySelectorAll("#hood-views .hood-lessons [role=tab][aria-selected=true]")]
    .find((t) => t.offsetParent)?.dataset.tabId;
  const id = selected || "chat";
  return [id === "hood" && lesson ? `hood:${lesson}` : id, ...rest];
}"""
# The full link from the query the server built: shown, and copied when the browser allows it.
SHOW_LINK_JS = """(query) => {
  const link = `${location.origin}${location.pathname}?${query}`;
  navigator.clipboard?.writeText(link).catch(() => {});
  window.playgroundShowLink?.();
  return link;
}"""
KV_LINKED = ("preset", "seq_len", "batch", "kv_dtype", "mode", "gpu_gb", "weights_dtype")


def app_link_rules(max_new_tokens_limit: int, hood_widgets: dict[str, Any]) -> LinkRules:
    """This app's link rules: its max new tokens, and every lesson's inputs as its widgets take them."""
    return link_rules(max_new_tokens_limit, link_params(VIEWS, hood_widgets))


def wire_links(
    loaded: Any,
    tabs: gr.Tabs,
    toolbar: dict,
    widgets: dict[str, dict],
    handlers: dict[str, Any],
    rules: LinkRules,
) -> None:
    """After the page's load event, open what a shared link asks for (or start the Step tab as
    usual); "Copy link" makes a link to the current tab's state, in the page's language."""

    def select_tab(request: gr.Request = None) -> Any:
        """The tab a link names (a bad link is told as a toast; the tabs then open as usual)."""
        tab = warn_bad_link(request, rules)
        return gr.Tabs(selected=tab) if tab else gr.skip()

    opened = loaded.then(select_tab, None, tabs, api_visibility="private")
    _wire_openers(opened, widgets, handlers, rules)
    _wire_copy_link(toolbar, widgets, handlers, rules)


def _wire_openers(opened: Any, widgets: dict[str, dict], handlers: dict[str, Any], rules: LinkRules) -> None:
    """After the tab is chosen, each tab opens its part of the link (Under the hood: the lesson)."""
    on = {"status": "status"}
    step_outputs = [*VIEW_OUTPUTS, *SETTINGS_INPUTS, "candidates"]
    connect(opened.then, handlers["step"].step_from_link, widgets["step"], step_outputs, api_name=None, **on)
    chat_outputs = [*ANSWER_OUTPUTS, *CONTROLS]
    connect(opened.then, handlers["chat"].chat_from_link, widgets["chat"], chat_outputs, api_name=None, **on)
    beam_outputs = [*RUN_OUTPUTS, "prompt", "chat", "beams", "steps", "length_penalty", "early_stopping"]
    connect(opened.then, handlers["beam"].beam_from_link, widgets["beam"], beam_outputs, api_name=None, **on)
    kv_outputs = [*CALCULATOR_INPUTS, *CALCULATOR_OUTPUTS]
    connect(opened.then, handlers["kv"].kv_from_link, widgets["kv"], kv_outputs, api_name=None, model=False)

    def hood_from_link(request: gr.Request = None) -> dict[str, Any]:
        """A shared link to one lesson: its sub-tab, its inputs (nothing runs until Run)."""
        return opened_from_link(VIEWS, link_to("hood", request, rules), session_lang(request))

    connect(opened.then, hood_from_link, widgets["hood"], link_outputs(VIEWS), api_name=None, model=False)
    compare = (handlers["compare"].compare_from_link, widgets["compare"], COMPARE_LINK_OUTPUTS)
    connect(opened.then, *compare, api_name=None, status="status_a")


def _wire_copy_link(
    toolbar: dict, widgets: dict[str, dict], handlers: dict[str, Any], rules: LinkRules
) -> None:
    """ "Copy link": the current tab's state as a query string, shown and copied."""
    kv = [widgets["kv"][name] for name in KV_LINKED]
    lessons = [name for view in VIEWS for name in run_inputs(view)]
    hood = [widgets["hood"][name] for name in lessons]

    def share_link(request: gr.Request, current_tab: str, *shown: Any) -> str:
        """The query string of a link to the current tab's state (the KV tab's: its controls; Under
        the hood's: the lesson on screen and its inputs)."""
        tab, _, lesson = current_tab.partition(":")
        if tab == "kv":
            values = dict(zip(KV_LINKED, shown, strict=False))
        elif tab == "hood":
            values = link_values(VIEWS, lesson, dict(zip(lessons, shown[len(KV_LINKED) :], strict=True)))
        else:
            values = handlers[tab].link_values(request) if tab in handlers else {}
        return make_query(tab, values, session_lang(request), rules)

    toolbar["copy_link"].click(
        friendly_errors(share_link),
        [toolbar["current_tab"], *kv, *hood],
        toolbar["current_tab"],
        js=CURRENT_TAB_JS,
        api_name="share_link",
        concurrency_limit=None,
        show_progress="hidden",
    ).then(
        lambda query: gr.Textbox(value=query, visible=True),
        toolbar["current_tab"],
        toolbar["link"],
        js=SHOW_LINK_JS,
        api_visibility="private",
    )
