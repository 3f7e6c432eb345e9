"""The "Under the hood" tab: one sub-tab per registered lesson view (ui/hood/__init__.py VIEWS).

For every view alike: the Run button streams the view's run into its components (API endpoint
`/hood_<lesson name>`, named parameters = the run's), Stop ends it within one model step and says
so, "Save trace" records what the view shows (ui/hood/record.py), errors become a toast and a
"Failed" status line with the inputs left as they were.
"""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from playground.engine.base import Engine
from playground.engine.control import Control
from playground.errors import Cancelled, PlaygroundError
from playground.traces import new_trace, save_trace
from playground.ui.common import connect, connect_after_ticket, table_rows
from playground.ui.hood.base import GROUPS, HoodEnv, LessonView, RunContext, status_line
from playground.ui.hood.record import record_views
from playground.ui.i18n import DEFAULT, i18n, localize, session_lang, t
from playground.ui.links import Link, Param, widget_param
from playground.ui.state import TabStates
from playground.workspace import Workspaces


class HoodTab:
    """The tab's handlers, shared by every view (see the module docstring)."""

    def __init__(
        self, env: HoodEnv, workspaces: Workspaces, states: TabStates, views: tuple[LessonView, ...]
    ) -> None:
        self.env, self.workspaces, self.states = env, workspaces, states
        self.views = {view.key: view for view in views}
        self.plot_labels: dict[str, Any] = {}  # figure name -> its label, i18n(key) or text (for traces)

    # --- per browser tab -------------------------------------------------------------------------

    def context(self, request: gr.Request | None, key: str, control: Control | None = None) -> RunContext:
        """A run's context: the engine, Stop, this tab's workspace and what the view shows now."""
        sid = _session(request)
        shown = self.states.get(sid).shown(key)
        workspace = self.workspaces.get(sid)
        control = control or Control()
        return RunContext(
            workspace.engine,
            self.env.draft,
            control,
            workspace,
            sid or "",
            lang=session_lang(request),
            shown=shown,
        )

    def remember(
        self, request: gr.Request | None, key: str, views: dict[str, Any], fresh: bool = False
    ) -> dict[str, Any]:
        """Keep what the view shows now (its trace is saved from it); returns views."""
        return self.states.get(_session(request)).remember(key, views, fresh)

    # --- the handlers every view gets ---------------------------------------------------------------

    def run(
        self, view: LessonView, inputs: dict[str, Any], request: gr.Request | None, ticket: int | None = None
    ) -> Iterator[dict]:
        """Stream a view's run; an error is shown as a "Failed" status line and raised for the toast.
        Stopped (Stop, or a ticket a Stop dropped while the run waited), its last update says so:
        an update the run made after the Stop never stays on screen."""
        shown: dict[str, Any] = {}  # every view the run set, its latest value (a trace records them)
        lang = session_lang(request)
        with self.workspaces.get(_session(request)).run(view.key, ticket) as control:
            if control.cancelled:
                yield _stopped(view, lang)
                return
            ctx = self.context(request, view.key, control)
            yield {f"{view.key}_status": t("hood.status.starting", lang, action=t(view.action, lang))}
            try:
                for update in view.run(ctx, **inputs):
                    shown.update(update)
                    yield update
                    control.check()
            except Cancelled:
                yield _stopped(view, lang)
                return
            except PlaygroundError as exc:
                yield {f"{view.key}_status": t("hood.status.failed", lang, why=localize(exc.message, lang))}
                raise
        self.remember(request, view.key, shown, fresh=True)

    def ticket(self, view: LessonView, request: gr.Request | None) -> dict[str, Any]:
        """The Run button, before its run joins the model queue: a ticket that Stop can drop."""
        return {f"{view.key}_ticket": self.workspaces.get(_session(request)).ticket(view.key)}

    def stop(self, view: LessonView, request: gr.Request | None) -> dict[str, Any]:
        """Cancel this tab's run of the view, running (the model stops within one step) or waiting
        in the queue, and say so."""
        if not self.workspaces.get(_session(request)).stop(view.key):
            return {f"{view.key}_status": gr.skip(), f"{view.key}_summary": gr.skip()}  # nothing ran
        return _stopped(view, session_lang(request))

    def trace(self, view: LessonView, request: gr.Request | None) -> str:
        """Save what the view shows as a recorded trace (JSON); its path, for the download. Its labels,
        headers and title are in the page's language, as the run's texts are."""
        shown = self.states.get(_session(request)).shown(view.key)
        if not shown:
            raise PlaygroundError(
                "Run this view first: there is nothing to save yet.", key="hood.error.no_run"
            )
        lang = session_lang(request)
        labels = {name: said(label, lang) for name, label in self.plot_labels.items()}
        headers = {name: [t(key, lang) for key in keys] for name, keys in view.tables.items()}
        data = {"view": view.key, "outputs": record_views(shown, labels, headers)}
        phase = str(shown.get(f"{view.key}_status", "")).removeprefix(status_line("", True, lang))
        title = t("hood.trace_title", lang, title=localize(view.lesson.title, lang), phase=phase)[:100]
        folder = Path(tempfile.mkdtemp(prefix="trace-"))
        engine = self.workspaces.get(_session(request)).engine
        return str(save_trace(new_trace("hood", title, engine, data), folder))

    def hood_texts(self, *tables: Any, request: gr.Request | None = None) -> dict[str, Any]:
        """What the page's language (or the tab's model: a model picked) changes here besides the
        static text: the tables' headers (a table keeps its rows) and the note shown when the tab's
        model is an engine the lessons can't run on."""
        lang = session_lang(request)
        views: dict[str, Any] = {
            name: gr.Dataframe(table_rows(rows), headers=[t(key, lang) for key in keys])
            for (name, keys), rows in zip(self.tables.items(), tables, strict=True)
        }
        views["hood_note"] = probes_note_update(self.workspaces.get(_session(request)).engine, lang)
        return views

    @property
    def tables(self) -> dict[str, list[str]]:
        """Every view's tables: component name -> its headers' keys."""
        return {name: keys for view in self.views.values() for name, keys in view.tables.items()}

    @property
    def text_outputs(self) -> list[str]:
        """What hood_texts sets."""
        return [*self.tables, "hood_note"]


def texts_handler(tab: HoodTab) -> Callable[..., dict[str, Any]]:
    """tab.hood_texts as Gradio calls it: one parameter per table (its component's name), then the
    request."""

    def hood_texts(*args: Any) -> dict[str, Any]:
        *tables, request = args
        return tab.hood_texts(*tables, request=request)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(name, kind) for name in tab.tables]
    params.append(inspect.Parameter("request", kind, default=None, annotation=gr.Request))
    hood_texts.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    hood_texts.__annotations__ = {"request": gr.Request}
    return hood_texts


def said(label: Any, lang: str) -> str:
    """A component's label as the page shows it in lang: i18n(key) translated, plain text as it is."""
    key = getattr(label, "key", None)
    return t(key, lang) if isinstance(key, str) else str(label)


def probes_note(engine: Engine, lang: str = DEFAULT) -> str:
    """Why none of the lessons runs on this engine."""
    return t("hood.no_probes", lang, why=localize(engine.capabilities.why_not("probes"), lang))


def probes_note_update(engine: Engine, lang: str = DEFAULT, **options: Any) -> Any:
    """The note above the lessons for this engine: why none runs on it, or hidden when they do."""
    runs = engine.capabilities.probes
    return gr.Markdown("" if runs else probes_note(engine, lang), visible=not runs, **options)


def _stopped(view: LessonView, lang: str = DEFAULT) -> dict[str, Any]:
    return {f"{view.key}_status": t("hood.status.stopped", lang), f"{view.key}_summary": ""}


def _session(request: gr.Request | None) -> str | None:
    return getattr(request, "session_hash", None)


def run_handler(tab: HoodTab, view: LessonView) -> Callable[..., Iterator[dict]]:
    """A Gradio handler for the view's run whose parameters are the run's own (its component names,
    its API's named parameters), plus the request Gradio fills in."""
    params = [p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in _run_parameters(view)]
    names = [p.name for p in params]

    def handler(*args: Any) -> Iterator[dict]:
        request, ticket = (*args[len(names) :], None, None)[:2]
        yield from tab.run(view, dict(zip(names, args, strict=False)), request, ticket)

    def extra(name: str, annotation: Any) -> inspect.Parameter:
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Parameter(name, kind, default=None, annotation=annotation)

    # the request Gradio fills in, then the button's ticket (a gr.State: not in the API)
    extras = [extra("request", gr.Request), extra(f"{view.key}_ticket", int | None)]
    handler.__signature__ = inspect.Signature([*params, *extras])  # type: ignore[attr-defined]
    handler.__annotations__ = {"request": gr.Request}
    handler.__name__ = handler.__qualname__ = view.api_name
    handler.__doc__ = view.run.__doc__
    return handler


def _run_parameters(view: LessonView) -> list[inspect.Parameter]:
    """The run's parameters after the context (its widget names)."""
    return list(inspect.signature(view.run).parameters.values())[1:]


def run_inputs(view: LessonView) -> list[str]:
    """The names of the widgets a view's run reads, in order (its API's named parameters)."""
    return [p.name for p in _run_parameters(view)]


def run_values(view: LessonView, widgets: dict[str, Any], quick: bool = False) -> list[Any]:
    """The values a run reads from the widgets as built (their defaults); quick: a short run's."""
    chosen = view.quick if quick else {}
    return [chosen.get(name, widgets[name].value) for name in run_inputs(view)]


def _ticket_handler(tab: HoodTab, view: LessonView) -> Callable[..., dict]:
    def ticket(request: gr.Request) -> dict[str, Any]:
        return tab.ticket(view, request)

    ticket.__name__ = f"hood_ticket_{view.key}"
    return ticket


def _stop_handler(tab: HoodTab, view: LessonView) -> Callable[..., dict]:
    def stop(request: gr.Request) -> dict[str, Any]:
        return tab.stop(view, request)

    stop.__name__ = f"hood_stop_{view.key}"
    return stop


def _trace_handler(tab: HoodTab, view: LessonView) -> Callable[..., dict]:
    def save(request: gr.Request) -> dict[str, Any]:
        return {f"{view.key}_trace_file": gr.File(tab.trace(view, request), visible=True)}

    save.__name__ = f"hood_trace_{view.key}"
    return save


def _wire_view(tab: HoodTab, view: LessonView, w: dict[str, Any]) -> None:
    """Run (streaming into the view's status line), Stop (through the run's ticket and the engine),
    Save trace, then the view's own events."""
    key, triggers = view.key, [w[f"{view.key}_run"].click]
    if f"{key}_submit" in w:  # a text box whose Enter runs the view
        triggers.append(w[f"{key}_submit"].submit)
    w[f"{key}_ticket"] = gr.State(None)
    run = (_ticket_handler(tab, view), [f"{key}_ticket"], run_handler(tab, view), w, view.all_outputs)
    connect_after_ticket(triggers, *run, api_name=view.api_name, status=f"{key}_status")
    connect(
        w[f"{key}_stop"].click,
        _stop_handler(tab, view),
        w,
        [f"{key}_status", f"{key}_summary"],
        api_name=None,
        model=False,
        queue=False,
    )
    connect(
        w[f"{key}_save"].click,
        _trace_handler(tab, view),
        w,
        [f"{key}_trace_file"],
        api_name=f"hood_{key}_trace",
        status=f"{key}_status",
        model=False,
    )
    view.wire(w, tab)


def _lesson_tab(view: LessonView, w: dict[str, Any], env: HoodEnv) -> None:
    with gr.Tab(i18n(view.label), id=view.tab_id, elem_id=view.tab_id):
        gr.Markdown(i18n(view.explain), elem_classes=["hood-explain"])
        view.layout(w, env)
        main = w[view.main]
        main.elem_classes = [*(main.elem_classes or []), "hood-main"]  # static/hood.css


def link_params(views: tuple[LessonView, ...], widgets: dict[str, Any]) -> dict[str, list[Param]]:
    """Each lesson's inputs as link parameters (view key -> parameters): a widget `<key>_<name>` is
    `<name>` in a link (`?tab=hood&view=attn&text=…`), checked as the widget would take it (a choice
    filled by a run, the logit lens's tracked tokens, is not in links)."""
    params: dict[str, list[Param]] = {}
    for view in views:
        found = [
            widget_param(name.removeprefix(f"{view.key}_"), name, widgets[name]) for name in run_inputs(view)
        ]
        params[view.key] = [param for param in found if param is not None]
    return params


def link_outputs(views: tuple[LessonView, ...]) -> list[str]:
    """What opening a link to a lesson may set: the tabs that show it, its inputs and status line."""
    groups = [f"hood_group_{group}" for group in dict.fromkeys(view.group for view in views)]
    inputs = [name for view in views for name in run_inputs(view)]
    return ["hood_views", *groups, *inputs, *(f"{view.key}_status" for view in views)]


def opened_from_link(views: tuple[LessonView, ...], link: Link | None, lang: str = DEFAULT) -> dict[str, Any]:
    """A link to one lesson: its sub-tab chosen (its group's first), its inputs set; nothing runs
    until Run. A link to the tab without a lesson changes nothing."""
    if link is None or "view" not in link.values:
        return {}
    view = next(view for view in views if view.key == link.values["view"])
    inputs = {name: value for name, value in link.values.items() if name != "view"}
    return {**open_at(view), **inputs, f"{view.key}_status": t("hood.link_opened", lang)}


def link_values(views: tuple[LessonView, ...], tab_id: str, shown: dict[str, Any]) -> dict[str, Any]:
    """What a link to the lesson whose sub-tab is `tab_id` carries: its key and its inputs as shown."""
    view = next((view for view in views if view.tab_id == tab_id), None)
    if view is None:
        return {}
    return {"view": view.key, **{name: shown[name] for name in run_inputs(view) if name in shown}}


def open_at(view: LessonView) -> dict[str, Any]:
    """Updates that select a lesson's sub-tab (its group first): a move from another tab."""
    return {
        "hood_views": gr.Tabs(selected=view.group_id),
        f"hood_group_{view.group}": gr.Tabs(selected=view.tab_id),
    }


def build_hood_tab(
    engine: Engine,
    workspaces: Workspaces,
    states: TabStates,
    views: tuple[LessonView, ...],
    draft: Engine | None = None,
) -> tuple[dict[str, Any], HoodTab]:
    """The tab (call inside a gr.Tab): one sub-tab per view. Returns its components by name and its
    handlers. draft: a second engine with the same tokenizer for speculative decoding."""
    env = HoodEnv.of(engine, draft)
    tab = HoodTab(env, workspaces, states, views)
    w: dict[str, Any] = {}
    # the note follows the tab's model (hood_texts runs again when a model is picked)
    w["hood_note"] = probes_note_update(engine, elem_id="hood-note")
    with gr.Tabs(elem_id="hood-views") as w["hood_views"]:  # a row of groups, each a row of lessons
        for group, title in GROUPS.items():
            members = [view for view in views if view.group == group]
            if not members:
                continue
            with (
                gr.Tab(i18n(title), id=f"hood-group-{group}"),
                gr.Tabs(elem_classes=["hood-lessons"]) as w[f"hood_group_{group}"],
            ):
                for view in members:
                    _lesson_tab(view, w, env)
    for name, component in w.items():  # every component findable by its name: #hood-kv-length
        if getattr(component, "elem_id", "") is None:
            component.elem_id = f"hood-{name.replace('_', '-')}"
    tab.plot_labels = {name: c.label for name, c in w.items() if isinstance(c, gr.Plot) and c.label}
    for view in views:
        _wire_view(tab, view, w)
    return w, tab
