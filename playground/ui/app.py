"""The whole app: a header with the loaded model, one tab per view, and the moves between tabs."""

from __future__ import annotations

import html
import weakref
from pathlib import Path
from typing import Any

import gradio as gr

from playground.api import ModelLookup, OneModel, openai_routes
from playground.engine.base import Engine
from playground.settings import Settings, load_settings
from playground.ui.beam_tab import RUN_OUTPUTS, build_beam_tab
from playground.ui.chat_tab import ANSWER_OUTPUTS, CONTROLS, build_chat_tab, connect_answer
from playground.ui.common import MODEL_QUEUE, connect, friendly_errors, set_model_concurrency
from playground.ui.crowd import release_closed_tabs, seed_queue_estimates
from playground.ui.hood import VIEWS, HoodTab, build_hood_tab
from playground.ui.hood.lens import FROM_STEP_OUTPUTS as LENS_FROM_STEP_OUTPUTS
from playground.ui.kv_tab import CALCULATOR_INPUTS, CALCULATOR_OUTPUTS, build_kv_tab
from playground.ui.links import make_query, warn_bad_link
from playground.ui.state import TabStates
from playground.ui.step_tab import SETTINGS_INPUTS, VIEW_OUTPUTS, build_step_tab
from playground.workspace import Workspaces

STATIC_DIR = Path(__file__).resolve().parents[2] / "static"
CSS_FILES = ("app.css", "step.css", "stage.css", "crowd.css", "bytes.css", "hood.css")
JS_FILES = ("plotclick.js", "app.js", "cards.js", "keys.js", "beam.js", "theme.js", "hood.js")
# The selected tab's id, read in the browser when "Copy link" is pressed (tab buttons have no ids).
CURRENT_TAB_JS = """(tab, ...rest) => {
  const ids = {"Chat": "chat", "Step by step": "step", "Beam search": "beam", "KV cache": "kv",
               "Under the hood": "hood"};
  const selected = document.querySelector("[role=tab][aria-selected=true]")?.innerText.trim();
  return [ids[selected] || "chat", ...rest];
}"""
# The full link from the query the server built: shown, and copied when the browser allows it.
# Each app's OpenAI-compatible routes (/v1/...), added to its server at launch (launch_options).
_API_ROUTES: weakref.WeakKeyDictionary[gr.Blocks, list[Any]] = weakref.WeakKeyDictionary()
SHOW_LINK_JS = """(query) => {
  const link = `${location.origin}${location.pathname}?${query}`;
  navigator.clipboard?.writeText(link).catch(() => {});
  window.playgroundShowLink?.();
  return link;
}"""


def header_markdown(engine: Engine) -> str:
    if engine.url:  # a serving engine (playground.engine.remote)
        return remote_header_markdown(engine)
    size = f" · {engine.num_parameters / 1e6:,.1f} M parameters" if engine.num_parameters else ""
    dtype = str(engine.dtype).removeprefix("torch.") if engine.dtype is not None else None
    dtype_text = f" · **dtype** {dtype}" if dtype else ""
    load_text = f" · loaded in {engine.load_seconds:.1f} s ({engine.source})"
    decode = engine.describe_decode()
    decode_text = info_line(decode, "decode-info") if decode else ""
    if engine.quantization:  # --quantize: the served weights are not the loaded ones
        decode_text += info_line(engine.quantization_line, "quant-info")
    line = (
        f"**Model:** {engine.name}{size} · **engine** {engine.kind} · **device** {engine.device_summary()}"
        f"{dtype_text}{load_text} · context {engine.context_length:,} tokens"
    )
    return f"## LLM generation playground\n{info_line(line)}{decode_text}"


def info_line(text: str, extra_class: str = "") -> str:
    """One header line (static/app.css ends a long one in "…"); the whole line is its tooltip."""
    tooltip = html.escape(text.replace("**", ""), quote=True)
    classes = f"model-info {extra_class}".strip()
    return f"<span class='{classes}' title='{tooltip}'>{text}</span>"


def remote_header_markdown(engine: Engine) -> str:
    """The served model, which engine computes every number (and whether that adapter was tested live)."""
    caps = engine.capabilities
    untested = "" if engine.tested_live else " · ⚠️ not yet tested against a live server"
    line = (
        f"**Model:** {engine.name} · **engine** {engine.kind} at {engine.url} (every number comes from it) · "
        f"top {caps.top_n:,} alternatives per position · context {engine.context_length:,} tokens{untested}"
    )
    return f"## LLM generation playground\n{info_line(line)}"


def build_demo(
    engine: Engine,
    settings: Settings,
    draft: Engine | None = None,
    workspaces: Workspaces | None = None,
    models: ModelLookup | None = None,
) -> gr.Blocks:
    """The app; draft: a second model with the same tokenizer for speculative decoding; workspaces: the
    tabs' objects (default: a store bounded by settings); models: which engine serves which model name
    on the OpenAI-compatible API (default: engine, under its model id)."""
    concurrency = engine.concurrency or settings.model_concurrency  # a running batch: its places
    set_model_concurrency(concurrency)
    if workspaces is None:
        workspaces = Workspaces(engine, settings.max_workspaces)
    states = TabStates(settings.max_workspaces)
    with gr.Blocks(title="LLM generation playground") as demo:
        toolbar = _header(engine)
        with gr.Tabs() as tabs:
            with gr.Tab("Chat", id="chat"):
                chat_w, chat_h = build_chat_tab(engine, settings, workspaces)
            with gr.Tab("Step by step", id="step"):
                step_w, step_h = build_step_tab(engine, workspaces)
            with gr.Tab("Beam search", id="beam"):
                beam_w, beam_h = build_beam_tab(engine, workspaces, states)
            with gr.Tab("KV cache", id="kv"):
                kv_w, kv_h = build_kv_tab(engine)
            with gr.Tab("Under the hood", id="hood"):
                hood_w, hood_h = build_hood_tab(engine, workspaces, states, VIEWS, draft=draft)
        _wire_moves(tabs, chat_w, chat_h, step_w, step_h, beam_w)
        _wire_lens_from_step(tabs, step_w, hood_w, hood_h)
        tab_widgets = {"chat": chat_w, "step": step_w, "beam": beam_w, "kv": kv_w}
        _wire_links(
            demo, tabs, toolbar, tab_widgets, {"chat": chat_h, "step": step_h, "beam": beam_h, "kv": kv_h}
        )
        release_closed_tabs(demo, workspaces, states)
    demo.queue(default_concurrency_limit=concurrency)
    seed_queue_estimates(demo, MODEL_QUEUE, settings.queue_first_estimate_s)
    _API_ROUTES[demo] = openai_routes(
        models or OneModel(engine),
        api_key=settings.api_key,
        max_tokens_limit=settings.max_new_tokens_limit,
        unbatched_places=settings.model_concurrency,
    )
    return demo


def _header(engine: Engine) -> dict[str, Any]:
    """The model line, then the speaker's tools: presenter mode, keyboard help, a link to this view."""
    t: dict[str, Any] = {}
    with gr.Row(elem_id="toolbar", equal_height=True):
        with gr.Column(scale=4, min_width=400):
            gr.Markdown(header_markdown(engine), elem_id="header")
        with gr.Row(elem_id="toolbar-buttons"):
            t["presenter"] = gr.Button("Presenter", size="sm", min_width=100, elem_id="presenter-toggle")
            t["help"] = gr.Button("Keys (?)", size="sm", min_width=70, elem_id="help-toggle")
            t["copy_link"] = gr.Button("Copy link", size="sm", min_width=80, elem_id="copy-link")
    t["link"] = gr.Textbox(
        label="Link to this view",
        buttons=["copy"],
        visible=False,
        elem_id="share-link",
        info="Opens this tab with the same prompt, settings and seed: the same answer.",
    )
    t["current_tab"] = gr.Textbox(visible=False)
    t["presenter"].click(None, js="() => { window.playgroundTogglePresenter(); }")
    t["help"].click(None, js="() => { window.playgroundToggleHelp(); }")
    return t


def _wire_links(
    demo: gr.Blocks, tabs: gr.Tabs, toolbar: dict, widgets: dict[str, dict], handlers: dict[str, Any]
) -> None:
    """Page load opens what a shared link asks for (or starts the Step tab as usual); "Copy link"
    makes a link to the current tab's state."""
    on = {"status": "status"}

    def select_tab(request: gr.Request = None) -> Any:
        """The tab a link names (a bad link is told as a toast; the tabs then open as usual)."""
        tab = warn_bad_link(request)
        return gr.Tabs(selected=tab) if tab else gr.skip()

    opened = demo.load(select_tab, None, tabs, api_visibility="private")
    step_outputs = [*VIEW_OUTPUTS, *SETTINGS_INPUTS, "candidates"]
    connect(opened.then, handlers["step"].step_from_link, widgets["step"], step_outputs, api_name=None, **on)
    chat_outputs = [*ANSWER_OUTPUTS, *CONTROLS]
    connect(opened.then, handlers["chat"].chat_from_link, widgets["chat"], chat_outputs, api_name=None, **on)
    beam_outputs = [*RUN_OUTPUTS, "prompt", "chat", "beams", "steps", "length_penalty", "early_stopping"]
    connect(opened.then, handlers["beam"].beam_from_link, widgets["beam"], beam_outputs, api_name=None, **on)
    kv_outputs = [*CALCULATOR_INPUTS, *CALCULATOR_OUTPUTS]
    connect(opened.then, handlers["kv"].kv_from_link, widgets["kv"], kv_outputs, api_name=None, model=False)

    def share_link(
        current_tab: str,
        preset: str,
        seq_len: float,
        batch: float,
        kv_dtype: str,
        mode: str,
        gpu_gb: float,
        weights_dtype: str,
        request: gr.Request = None,
    ) -> str:
        """The query string of a link to the current tab's state (the KV tab's: its controls)."""
        if current_tab == "kv":
            values = {
                "preset": preset,
                "seq_len": seq_len,
                "batch": batch,
                "kv_dtype": kv_dtype,
                "mode": mode,
                "gpu_gb": gpu_gb,
                "weights_dtype": weights_dtype,
            }
        else:
            values = handlers[current_tab].link_values(request) if current_tab in handlers else {}
        return make_query(current_tab, values)

    kv_inputs = [
        widgets["kv"][name]
        for name in ("preset", "seq_len", "batch", "kv_dtype", "mode", "gpu_gb", "weights_dtype")
    ]
    toolbar["copy_link"].click(
        friendly_errors(share_link),
        [toolbar["current_tab"], *kv_inputs],
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
    """Theme, CSS and JS belong to launch() in Gradio 6; so does the bound on Gradio's per-tab state,
    which follows the workspace bound (settings from the environment when not given); and demo's
    OpenAI-compatible routes, which its FastAPI app gets when it is made (`app_kwargs`)."""
    scripts = [(STATIC_DIR / name).read_text().strip() for name in JS_FILES]
    settings = settings or load_settings()
    options: dict[str, object] = {
        "state_session_capacity": settings.max_workspaces,
        "theme": gr.themes.Soft(),
        "css_paths": [STATIC_DIR / name for name in CSS_FILES],
        # Each file is one `() => {...}` function; launch() takes one, so call them in turn.
        "js": "() => {\n" + "".join(f"({script})();\n" for script in scripts) + "}",
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
