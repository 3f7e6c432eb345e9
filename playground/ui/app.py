"""The whole app: a header with the loaded model, then one tab per view."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from playground.model import LoadedModel
from playground.settings import Settings
from playground.ui.beam_tab import build_beam_tab
from playground.ui.chat_tab import build_chat_tab
from playground.ui.common import set_model_concurrency
from playground.ui.kv_tab import build_kv_tab
from playground.ui.step_tab import build_step_tab

STATIC_DIR = Path(__file__).resolve().parents[2] / "static"
CSS_FILES = ("app.css", "step.css")
JS_FILES = ("app.js", "step.js", "beam.js")


def device_summary(lm: LoadedModel) -> str:
    """'cpu', 'cuda', or for a model spread by device_map: 'cuda:0 (20 layers), cpu (10 layers)'."""
    device_map = getattr(lm.model, "hf_device_map", None)
    if not device_map or len(set(device_map.values())) == 1:
        return lm.device.type
    counts: dict[str, int] = {}
    for placement in device_map.values():
        name = f"cuda:{placement}" if isinstance(placement, int) else str(placement)
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} ({count} modules)" for name, count in counts.items())


def header_markdown(lm: LoadedModel) -> str:
    return (
        "## LLM generation playground\n"
        f"<span class='model-info'>**Model:** {lm.name} · {lm.num_parameters / 1e6:.1f} M parameters · "
        f"**device** {device_summary(lm)} · **dtype** {str(lm.dtype).removeprefix('torch.')} · "
        f"loaded in {lm.load_seconds:.1f} s ({lm.source}) · context {lm.context_length} tokens</span>"
    )


def build_demo(lm: LoadedModel, settings: Settings) -> gr.Blocks:
    set_model_concurrency(settings.model_concurrency)
    with gr.Blocks(title="LLM generation playground") as demo:
        gr.Markdown(header_markdown(lm), elem_id="header")
        with gr.Tabs() as tabs:
            with gr.Tab("Chat", id="chat"):
                build_chat_tab(lm, settings)
            with gr.Tab("Step by step", id="step"):
                step_tab = build_step_tab(lm)
            with gr.Tab("Beam search", id="beam"):
                beam_tab = build_beam_tab(lm)
            with gr.Tab("KV cache", id="kv"):
                build_kv_tab(lm)
        step_tab.connect_start(demo.load)  # candidates ready on first paint, no click needed
        step_tab.connect_open_prefix(
            beam_tab.open_button.click, beam_tab.searched_prompt, beam_tab.searched_chat, beam_tab.prefix_ids
        ).then(lambda: gr.Tabs(selected="step"), None, tabs, api_visibility="private")
    demo.queue(default_concurrency_limit=settings.model_concurrency)
    return demo


def launch_options() -> dict[str, object]:
    """Theme, CSS and JS belong to launch() in Gradio 6."""
    scripts = [(STATIC_DIR / name).read_text().strip() for name in JS_FILES]
    return {
        "theme": gr.themes.Soft(),
        "css_paths": [STATIC_DIR / name for name in CSS_FILES],
        # Each file is one `() => {...}` function; launch() takes one, so call them in turn.
        "js": "() => {\n" + "".join(f"({script})();\n" for script in scripts) + "}",
    }
