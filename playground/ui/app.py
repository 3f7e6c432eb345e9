"""The whole app: a header with this tab's model and its picker, one tab per view, and the moves
between tabs."""

from __future__ import annotations

import html
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from playground.api import ModelLookup, RegistryModels, openai_routes
from playground.engine.base import Engine
from playground.models import ModelRegistry
from playground.settings import Settings, load_settings
from playground.ui.beam_tab import TEXT_OUTPUTS as BEAM_TEXT_OUTPUTS
from playground.ui.beam_tab import build_beam_tab
from playground.ui.chat_tab import TEXT_OUTPUTS as CHAT_TEXT_OUTPUTS
from playground.ui.chat_tab import build_chat_tab, connect_answer
from playground.ui.common import MODEL_QUEUE, connect, set_model_concurrency
from playground.ui.compare import TEXT_OUTPUTS as COMPARE_TEXT_OUTPUTS
from playground.ui.compare import build_compare_tab
from playground.ui.crowd import release_closed_tabs, seed_queue_estimates
from playground.ui.hood import VIEWS, HoodTab, build_hood_tab
from playground.ui.hood.lens import FROM_STEP_OUTPUTS as LENS_FROM_STEP_OUTPUTS
from playground.ui.hood.tab import texts_handler as hood_texts
from playground.ui.i18n import (
    LANGUAGES,
    browser_script,
    gradio_i18n,
    i18n,
    localize,
    named_tabs,
    session_lang,
    t,
    tab_names,
)
from playground.ui.kv_tab import CALCULATOR_OUTPUTS, TEXT_OUTPUTS, build_kv_tab
from playground.ui.links import TAB_TITLES
from playground.ui.model_picker import ModelPicker
from playground.ui.ranges import say_when_clamped
from playground.ui.share import app_link_rules, wire_links
from playground.ui.state import TabStates
from playground.ui.step_tab import VIEW_OUTPUTS, build_step_tab
from playground.workspace import Workspaces

STATIC_DIR = Path(__file__).resolve().parents[2] / "static"
CSS_FILES = ("app.css", "step.css", "stage.css", "crowd.css", "bytes.css", "hood.css", "models.css")
JS_FILES = ("i18n.js", "plotclick.js", "app.js", "cards.js", "keys.js", "beam.js", "theme.js", "hood.js")
# The header's language switch: the page's language now (static/i18n.js decides it on load)...
LANGUAGE_NOW_JS = "() => window.playgroundLanguage()"
# ...and a choice: Gradio's own and our static text change at once; ?lang= in the address tells the
# server (every later request carries it), and stays for a reload.
SET_LANGUAGE_JS = "(lang) => window.playgroundSetLanguage(lang)"
# Each app's OpenAI-compatible routes (/v1/...), added to its server at launch (launch_options).
_API_ROUTES: weakref.WeakKeyDictionary[gr.Blocks, list[Any]] = weakref.WeakKeyDictionary()


def header_markdown(engine: Engine, lang: str = "en") -> str:
    """The title and the loaded model (its decode path and quantization, engine-made lines), in lang."""
    if engine.url:  # a serving engine (playground.engine.remote)
        return remote_header_markdown(engine, lang)
    size = t("app.header.size", lang, millions=engine.num_parameters / 1e6) if engine.num_parameters else ""
    dtype = str(engine.dtype).removeprefix("torch.") if engine.dtype is not None else None
    decode = engine.describe_decode()
    decode_text = info_line(localize(decode, lang), "decode-info") if decode else ""
    if engine.quantization:  # --quantize: the served weights are not the loaded ones
        decode_text += info_line(localize(engine.quantization_line, lang), "quant-info")
    details = t(
        "app.header.details",
        lang,
        size=size,
        kind=engine.kind,
        device=engine.device_summary(),
        dtype=t("app.header.dtype", lang, dtype=dtype) if dtype else "",
        seconds=engine.load_seconds,
        source=engine.source,
        context=engine.context_length,
    )
    return f"## {t('app.title', lang)}\n{model_line(engine.name, details, lang)}{decode_text}"


def model_line(name: str, details: str, lang: str) -> str:
    """The model's line: its name, then its details; a note in brackets after the name ("(embedded
    Q4_1 GGUF)") goes with the details, so on stage the name alone fits one line."""
    short, bracket, note = name.partition(" (")
    return info_line(t("app.header.name", lang, name=short), details=f"{bracket}{note}{details}")


def info_line(text: str, extra_class: str = "", details: str = "") -> str:
    """One header line (static/app.css wraps a long one); details: the part presenter mode leaves to
    the tooltip, which holds the whole line."""
    tooltip = html.escape((text + details).replace("**", ""), quote=True)
    classes = f"model-info {extra_class}".strip()
    more = f"<span class='model-details'>{details}</span>" if details else ""
    return f"<span class='{classes}' title='{tooltip}'>{text}{more}</span>"


def remote_header_markdown(engine: Engine, lang: str = "en") -> str:
    """The served model, which engine computes every number (and whether that adapter was tested live)."""
    details = t(
        "app.header.remote",
        lang,
        kind=engine.kind,
        url=engine.url,
        top=engine.capabilities.top_n,
        context=engine.context_length,
        untested="" if engine.tested_live else t("app.header.untested", lang),
    )
    return f"## {t('app.title', lang)}\n{model_line(engine.name, details, lang)}"


def build_demo(
    engine: Engine,
    settings: Settings,
    draft: Engine | None = None,
    workspaces: Workspaces | None = None,
    models: ModelLookup | None = None,
    registry: ModelRegistry | None = None,
) -> gr.Blocks:
    """The app; draft: a second model with the same tokenizer for speculative decoding; workspaces: the
    tabs' objects (default: a store bounded by settings); models: which engine serves which model name
    on the OpenAI-compatible API (default: the registry's loaded models, engine first); registry: the
    models a tab may pick and compare (default: one holding `engine`, the app's own, never unloaded)."""
    concurrency = engine.concurrency or settings.model_concurrency  # a running batch: its places
    set_model_concurrency(concurrency)
    if workspaces is None:
        workspaces = Workspaces(engine, settings.max_workspaces, registry or ModelRegistry(settings))
    states = TabStates(settings.max_workspaces)
    picker = ModelPicker(workspaces)
    with gr.Blocks(title="LLM generation playground") as demo:
        toolbar = _header(engine, picker)
        built: dict[str, tuple[dict[str, Any], Any]] = {}  # tab -> (its components by name, handlers)
        with gr.Tabs(elem_id="main-tabs") as tabs:
            with _tab("chat"):
                built["chat"] = build_chat_tab(engine, settings, workspaces)
            with _tab("step"):
                built["step"] = build_step_tab(engine, workspaces)
            with _tab("beam"):
                built["beam"] = build_beam_tab(engine, workspaces, states)
            with _tab("kv"):
                built["kv"] = build_kv_tab(engine, workspaces)
            with _tab("hood"):
                built["hood"] = build_hood_tab(engine, workspaces, states, VIEWS, draft=draft)
            with _tab("compare"):
                built["compare"] = build_compare_tab(workspaces, settings)
        _wire_tabs(demo, tabs, toolbar, picker, built, settings.max_new_tokens_limit)
        release_closed_tabs(demo, workspaces, states)
        say_when_clamped(demo)  # every slider names a typed value its box brought into range
    demo.queue(default_concurrency_limit=concurrency)
    seed_queue_estimates(demo, MODEL_QUEUE, settings.queue_first_estimate_s)
    _API_ROUTES[demo] = openai_routes(
        models or RegistryModels(workspaces.registry, engine),
        api_key=settings.api_key,
        max_tokens_limit=settings.max_new_tokens_limit,
        unbatched_places=settings.model_concurrency,
    )
    return demo


def _wire_tabs(
    demo: gr.Blocks,
    tabs: gr.Tabs,
    toolbar: dict,
    picker: ModelPicker,
    built: dict[str, tuple[dict, Any]],
    max_new_tokens_limit: int,
) -> None:
    """The events between the tabs: moves, the page's language, the model picker, shared links."""
    widgets = {name: tab[0] for name, tab in built.items()}
    handlers = {name: tab[1] for name, tab in built.items()}
    _wire_moves(tabs, widgets["chat"], handlers["chat"], widgets["step"], handlers["step"], widgets["beam"])
    _wire_lens_from_step(tabs, widgets["step"], widgets["hood"], handlers["hood"])
    # A tab whose server-built text must follow a language switch (or the tab's model) adds its
    # handlers here.
    texts = [
        (toolbar, picker.model_choices, ["model"]),
        (widgets["chat"], handlers["chat"].chat_texts, CHAT_TEXT_OUTPUTS),
        (widgets["step"], handlers["step"].step_texts, VIEW_OUTPUTS),
        (widgets["beam"], handlers["beam"].beam_texts, BEAM_TEXT_OUTPUTS),
        (widgets["kv"], handlers["kv"].kv_texts, TEXT_OUTPUTS),
        (widgets["compare"], handlers["compare"].compare_texts, COMPARE_TEXT_OUTPUTS),
        (widgets["hood"], hood_texts(handlers["hood"]), handlers["hood"].text_outputs),
    ]
    reruns = [(widgets["kv"], handlers["kv"].kv_recalculate, CALCULATOR_OUTPUTS)]
    opened, shown = _wire_language(demo, picker.workspaces, toolbar, texts, reruns)
    _wire_picker(toolbar, picker, shown, widgets, handlers)
    del handlers["hood"]  # a link to a lesson is read from its widgets (ui/share.py)
    rules = app_link_rules(max_new_tokens_limit, widgets["hood"])
    wire_links(opened, tabs, toolbar, widgets, handlers, rules)


def _tab(name: str) -> gr.Tab:
    """One of the main tabs, named in the page's language (its name is sent again in the session's
    language, as every tab's: _wire_language)."""
    return gr.Tab(i18n(TAB_TITLES[name]), id=name, elem_id=f"tab-{name}")


def _header(engine: Engine, picker: ModelPicker) -> dict[str, Any]:
    """The model line, then the speaker's tools: this tab's model, the language, presenter mode,
    keyboard help, a link to this view; under them the model picker's status line."""
    tools: dict[str, Any] = {}
    with gr.Row(elem_id="toolbar", equal_height=True):
        with gr.Column(scale=4, min_width=400):
            tools["header"] = gr.Markdown(header_markdown(engine), elem_id="header")
        with gr.Row(elem_id="toolbar-buttons"):
            tools["model"] = picker.dropdown()
            tools["language"] = gr.Radio(
                [(language.name, code) for code, language in LANGUAGES.items()],
                value="en",
                label=i18n("app.language"),
                show_label=False,
                container=False,
                min_width=120,
                elem_id="language-switch",
            )
            tools["presenter"] = gr.Button(
                i18n("app.presenter"), size="sm", min_width=100, elem_id="presenter-toggle"
            )
            tools["help"] = gr.Button(i18n("app.keys"), size="sm", min_width=70, elem_id="help-toggle")
            tools["copy_link"] = gr.Button(
                i18n("app.copy_link"), size="sm", min_width=80, elem_id="copy-link"
            )
    tools["link"] = gr.Textbox(
        label=i18n("app.link"),
        buttons=["copy"],
        visible=False,
        elem_id="share-link",
        info=i18n("app.link.info"),
    )
    tools["model_status"] = gr.Markdown("", elem_id="model-status")
    tools["current_tab"] = gr.Textbox(visible=False)
    tools["presenter"].click(None, js="() => { window.playgroundTogglePresenter(); }")
    tools["help"].click(None, js="() => { window.playgroundToggleHelp(); }")
    return tools


Relabel = tuple[dict[str, Any], Callable[..., dict[str, Any]], list[str]]  # widgets, handler, outputs


def _wire_language(
    demo: gr.Blocks, workspaces: Workspaces, toolbar: dict, texts: list[Relabel], reruns: list[Relabel]
) -> tuple[Any, Callable[[Any], Any]]:
    """The page's language (playground/ui/i18n): static text follows it in the browser; text the
    server built is built again in it, on page load and on each switch of the header's radio: the
    header (this tab's model) and every tab's name (all rows), then each tab's `texts` (a handler giving its
    server-built text in the session's language), and on a switch its `reruns` (a calculation shown
    again: the page load runs those through its link openers). Returns the page-load event (shared
    links open after it) and `shown` (the same server text after another event's .then or .success: a
    model picked)."""
    tabs = named_tabs(demo)  # every row's: Gradio's own translation misses the tabs not drawn yet

    def header_text(request: gr.Request = None) -> dict[str, Any]:
        """The header and every tab's name in the session's language."""
        lang = session_lang(request)
        engine = workspaces.get(getattr(request, "session_hash", None)).engine
        return {"header": header_markdown(engine, lang), **tab_names(tabs, lang)}

    def shown(after: Any) -> Any:
        """After an event (after: its .then or .success), the server's text in the session's language."""
        widgets = {"header": toolbar["header"], **tabs}
        last = connect(after, header_text, widgets, list(widgets), api_name=None, model=False)
        for widgets, handler, names in texts:
            last = connect(last.then, handler, widgets, names, api_name=None, model=False)
        return last

    opened = shown(demo.load(None, None, toolbar["language"], js=LANGUAGE_NOW_JS).then)
    chosen = toolbar["language"].input(None, toolbar["language"], None, js=SET_LANGUAGE_JS, queue=False)
    switched = shown(chosen.then)
    for widgets, handler, names in reruns:
        connect(switched.then, handler, widgets, names, api_name=None, model=False)
    return opened, shown


def _wire_picker(
    toolbar: dict, picker: ModelPicker, shown: Callable[[Any], Any], widgets: dict[str, dict], handlers: dict
) -> None:
    """A model picked (API /model_pick): its load streams into the status line; once this tab uses
    it, the header and the server's text say so, the Chat, Beam and KV tabs drop the old model's
    results (the chat's messages stay: the next answer is the new model's; the KV calculator's
    "Loaded model" is the new one), and Step by step starts afresh on the new model with its prompt."""
    picked = connect(
        toolbar["model"].input,
        picker.model_pick,
        toolbar,
        ["model", "model_status"],
        api_name="model_pick",
        status="model_status",
        model=False,
    )
    shown(picked.success)
    for tab, outputs in CLEARED.items():
        connect(picked.success, _cleared(tab), widgets[tab], outputs, api_name=None, model=False, queue=False)
    kv, kv_h = widgets["kv"], handlers["kv"]
    changed = (kv_h.kv_model_changed, kv, ["config_text", "weights_dtype"])
    loaded = connect(picked.success, *changed, api_name=None, model=False)
    connect(loaded.then, kv_h.kv_recalculate, kv, CALCULATOR_OUTPUTS, api_name=None, model=False)
    connect(
        picked.success,
        handlers["step"].step_start,
        widgets["step"],
        VIEW_OUTPUTS,
        api_name=None,
        status="status",
    )


# The views of a tab that show the last model's results (emptied when the tab picks another model).
CLEARED = {
    "chat": ["token_view", "status", "branch"],
    "beam": ["plot", "status", "table", "prefix_text"],
    "kv": ["measured", "measure_table", "measured_quant", "measure_quant_table"],
}


def _cleared(tab: str) -> Callable[[], dict[str, Any]]:
    """A tab's views of the last model's results, emptied (a new model picked)."""

    def clear() -> dict[str, Any]:
        empty = {name: "" for name in CLEARED[tab]}
        if tab == "chat":
            empty["branch"] = gr.Dropdown(choices=[], value=None, visible=False)
        if tab == "beam":
            empty.update(plot=None, table=[])
        if tab == "kv":
            empty.update(measure_table=[], measure_quant_table=[])
        return empty

    clear.__name__ = f"{tab}_cleared"
    return clear


def _wire_moves(tabs: gr.Tabs, chat_w: dict, chat_h: Any, step_w: dict, step_h: Any, beam_w: dict) -> None:
    """A beam node or a chat token opens in Step by step; a step path continues as chat. Each move
    hands over the tree's records (no replay)."""
    on = {"status": "status"}

    def to_step() -> Any:
        return gr.Tabs(selected="step")

    def to_chat() -> Any:
        return gr.Tabs(selected="chat")

    beam_open = {**step_w, "open": beam_w["open"]}
    connect(
        beam_w["open"].click,
        step_h.step_open_beam_node,
        beam_open,
        VIEW_OUTPUTS,
        api_name="step_open_beam_node",
        show_progress_on=[beam_w["status"], step_w["status"]],  # a wait shows in the tab clicked in
        **on,
    ).success(to_step, None, tabs, api_visibility="private")
    chat_open = {**step_w, "open_position": chat_w["open_position"]}
    from_chat = {"show_progress_on": [chat_w["status"], step_w["status"]]}
    for trigger, handler, name in (
        (chat_w["open_step"].click, step_h.step_open_chat_token, "step_open_chat_token"),
        (chat_w["token_view"].click, step_h.open_clicked, None),
    ):
        connect(trigger, handler, chat_open, VIEW_OUTPUTS, api_name=name, **on, **from_chat).success(
            to_step, None, tabs, api_visibility="private"
        )
    continue_chat = {**chat_w, "continue_chat": step_w["continue_chat"]}
    event = connect_answer(
        step_w["continue_chat"].click,
        chat_h.chat_from_step,
        continue_chat,
        "chat_from_step",
        chat_h.chat_ticket,
        show_progress_on=[step_w["status"], chat_w["status"]],
    )
    event.then(to_chat, None, tabs, api_visibility="private")


def _wire_lens_from_step(tabs: gr.Tabs, step_w: dict, hood_w: dict, hood: HoodTab) -> None:
    """The Step tab's "Logit lens" button opens Under the hood > Logit lens at the current step."""
    lens = hood.views["lens"]

    def to_hood() -> Any:
        return gr.Tabs(selected="hood")

    def hood_lens_step(request: gr.Request = None) -> dict[str, Any]:
        """The logit lens at the Step tab's current step."""
        return lens.at_step(hood, request)  # type: ignore[attr-defined]

    widgets = {**hood_w, "open_lens": step_w["open_lens"], "status": step_w["status"]}
    connect(
        step_w["open_lens"].click,
        hood_lens_step,
        widgets,
        LENS_FROM_STEP_OUTPUTS,
        api_name="hood_lens_step",
        status="status",
    ).success(to_hood, None, tabs, api_visibility="private")


def launch_options(settings: Settings | None = None, demo: gr.Blocks | None = None) -> dict[str, object]:
    """Theme, CSS, JS and the languages' strings belong to launch() in Gradio 6; so does the bound on
    Gradio's per-tab state, which follows the workspace bound (settings from the environment when
    not given); and demo's OpenAI-compatible routes, which its FastAPI app gets when it is made
    (`app_kwargs`)."""
    scripts = [(STATIC_DIR / name).read_text().strip() for name in JS_FILES]
    settings = settings or load_settings()
    options: dict[str, object] = {
        "state_session_capacity": settings.max_workspaces,
        "theme": gr.themes.Soft(),
        "css_paths": [STATIC_DIR / name for name in CSS_FILES],
        # Each file is one `() => {...}` function; launch() takes one, so call them in turn.
        "js": "() => {\n" + "".join(f"({script})();\n" for script in [browser_script(), *scripts]) + "}",
        "i18n": gradio_i18n(),
    }
    return with_api(demo, options) if demo is not None else options


def with_api(demo: gr.Blocks, options: dict[str, Any]) -> dict[str, Any]:
    """launch() options that also serve demo's OpenAI-compatible API (/v1/...) on the same server: its
    routes go first in the FastAPI app Gradio makes (FastAPI's own `routes` argument)."""
    app_kwargs = dict(options.get("app_kwargs") or {})
    app_kwargs.setdefault("routes", list(_API_ROUTES.get(demo, [])))
    return {**options, "app_kwargs": app_kwargs}


LAUNCH_ATTEMPTS = 3


def launch_local(demo: gr.Blocks, port: int | None = None, **options: Any) -> str:
    """demo.launch() on 127.0.0.1 without blocking (tests, benchmarks, scripts), with its OpenAI-compatible
    API; its base URL.

    Gradio checks at launch that localhost answers a HEAD request within 3 s and refuses to start
    otherwise ("When localhost is not accessible..."). On a machine under load the first answer can
    take longer: close and launch again, a few times, before failing."""
    for attempt in range(1, LAUNCH_ATTEMPTS + 1):
        try:
            _, url, _ = demo.launch(
                server_name="127.0.0.1",
                server_port=port,
                prevent_thread_lock=True,
                quiet=True,
                **with_api(demo, options),
            )
            return url.rstrip("/")
        except ValueError as exc:
            if "localhost is not accessible" not in str(exc) or attempt == LAUNCH_ATTEMPTS:
                raise
            demo.close()
    raise AssertionError("unreachable")
