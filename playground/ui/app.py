"""The whole app: a header with the loaded model, one tab per view, and the moves between tabs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from playground.engine.base import Engine
from playground.settings import Settings, load_settings
from playground.ui.beam_tab import build_beam_tab
from playground.ui.chat_tab import ANSWER_OUTPUTS, build_chat_tab
from playground.ui.common import MODEL_QUEUE, connect, set_model_concurrency
from playground.ui.crowd import release_closed_tabs, seed_queue_estimates
from playground.ui.kv_tab import build_kv_tab
from playground.ui.step_tab import VIEW_OUTPUTS, build_step_tab
from playground.workspace import Workspaces

STATIC_DIR = Path(__file__).resolve().parents[2] / "static"
CSS_FILES = ("app.css", "step.css", "crowd.css")
JS_FILES = ("app.js", "step.js", "beam.js")


def device_summary(engine: Engine) -> str:
    """'cpu', 'cuda', or for a model spread by device_map: 'cuda:0 (20 layers), cpu (10 layers)'."""
    model = getattr(engine, "model", None)
    device_map = getattr(model, "hf_device_map", None)
    device = getattr(engine, "device", None)
    if not device_map or len(set(device_map.values())) == 1:
        return device.type if device is not None else engine.kind
    counts: dict[str, int] = {}
    for placement in device_map.values():
        name = f"cuda:{placement}" if isinstance(placement, int) else str(placement)
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} ({count} modules)" for name, count in counts.items())


def header_markdown(engine: Engine) -> str:
    if getattr(engine, "url", None):  # a serving engine (playground.engine.remote)
        return remote_header_markdown(engine)
    parameters = getattr(engine, "num_parameters", None)
    size = f" · {parameters / 1e6:,.1f} M parameters" if parameters else ""
    dtype = getattr(engine, "dtype", None)
    dtype_text = f" · **dtype** {str(dtype).removeprefix('torch.')}" if dtype is not None else ""
    loaded = getattr(engine, "load_seconds", None)
    load_text = f" · loaded in {loaded:.1f} s ({engine.source})" if loaded is not None else ""
    return (
        "## LLM generation playground\n"
        f"<span class='model-info'>**Model:** {engine.name}{size} · **engine** {engine.kind} · "
        f"**device** {device_summary(engine)}{dtype_text}{load_text} · "
        f"context {engine.context_length:,} tokens</span>"
    )


def remote_header_markdown(engine: Any) -> str:
    """The served model, which engine computes every number (and whether that adapter was tested live)."""
    caps = engine.capabilities
    untested = "" if engine.adapter.tested_live else " · ⚠️ not yet tested against a live server"
    return (
        "## LLM generation playground\n"
        f"<span class='model-info'>**Model:** {engine.name} · **engine** {engine.kind} at {engine.url} "
        f"(every number comes from it) · top {caps.top_n:,} alternatives per position · "
        f"context {engine.context_length:,} tokens{untested}</span>"
    )


def build_demo(engine: Engine, settings: Settings, workspaces: Workspaces | None = None) -> gr.Blocks:
    """The app over engine; workspaces: the tabs' objects (default: a store bounded by settings)."""
    set_model_concurrency(settings.model_concurrency)
    if workspaces is None:
        workspaces = Workspaces(engine, settings.max_workspaces)
    with gr.Blocks(title="LLM generation playground") as demo:
        gr.Markdown(header_markdown(engine), elem_id="header")
        with gr.Tabs() as tabs:
            with gr.Tab("Chat", id="chat"):
                chat_w, chat_h = build_chat_tab(engine, settings, workspaces)
            with gr.Tab("Step by step", id="step"):
                step_w, step_h = build_step_tab(engine, workspaces)
            with gr.Tab("Beam search", id="beam"):
                beam_w = build_beam_tab(engine, workspaces)
            with gr.Tab("KV cache", id="kv"):
                build_kv_tab(engine)
        _wire_moves(demo, tabs, chat_w, chat_h, step_w, step_h, beam_w)
        release_closed_tabs(demo, workspaces)
    demo.queue(default_concurrency_limit=settings.model_concurrency)
    seed_queue_estimates(demo, MODEL_QUEUE, settings.queue_first_estimate_s)
    return demo


def _wire_moves(
    demo: gr.Blocks, tabs: gr.Tabs, chat_w: dict, chat_h: Any, step_w: dict, step_h: Any, beam_w: dict
) -> None:
    """Page load starts the Step tab; a beam node or a chat token opens in Step by step; a step
    path continues as chat. Each move hands over the tree's records (no replay)."""
    on = {"status": "status"}
    connect(demo.load, step_h.step_start, step_w, VIEW_OUTPUTS, api_name=None, **on)

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
    event = connect(
        step_w["continue_chat"].click, chat_h.chat_from_step, continue_chat, ANSWER_OUTPUTS,
        api_name="chat_from_step", trigger_mode="once", status="status",
        show_progress_on=[step_w["status"], chat_w["status"]],
    )  # fmt: skip
    chat_w["answer_events"].append(event)
    event.then(to_chat, None, tabs, api_visibility="private")


def launch_options(settings: Settings | None = None) -> dict[str, object]:
    """Theme, CSS and JS belong to launch() in Gradio 6; so does the bound on Gradio's per-tab state,
    which follows the workspace bound (settings from the environment when not given)."""
    scripts = [(STATIC_DIR / name).read_text().strip() for name in JS_FILES]
    settings = settings or load_settings()
    return {
        "state_session_capacity": settings.max_workspaces,
        "theme": gr.themes.Soft(),
        "css_paths": [STATIC_DIR / name for name in CSS_FILES],
        # Each file is one `() => {...}` function; launch() takes one, so call them in turn.
        "js": "() => {\n" + "".join(f"({script})();\n" for script in scripts) + "}",
    }
