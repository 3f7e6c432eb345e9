"""The Chat tab's settings column: its components, their ranges and defaults, and their values
as one `ChatControls` (a handler parameter annotated with it stands for all of them, see
ui/common.py `connect`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import gradio as gr

from playground.chat import ChatRequest
from playground.engine.base import Engine
from playground.engine.prompts import Message
from playground.engine.sampling import SamplingSettings, validate_settings
from playground.settings import Settings
from playground.ui.common import UncheckedSlider, as_number, as_whole, parse_seed

# A newcomer's first answer should be right: at this temperature and seed the embedded model
# answers the README's questions as it does greedily (README, "Chat tab": how it was measured).
DEFAULT_TEMPERATURE = 0.3
DEFAULT_SEED = "0"


@dataclass(frozen=True)
class ChatControls:
    """The settings column's values as they arrive from the UI or the API (a link, a test)."""

    system_prompt: Any = ""
    temperature: Any = DEFAULT_TEMPERATURE
    top_k: Any = 50
    top_p: Any = 0.95
    min_p: Any = 0.0
    repetition_penalty: Any = 1.0
    max_new_tokens: Any = 256
    seed: Any = DEFAULT_SEED
    show_template: Any = False

    def settings(self) -> tuple[SamplingSettings, list[str]]:
        """The sampling settings, each within its slider's range, and a note for each value
        that was brought into it; a value the engine cannot use is refused with its name."""
        values = {
            "temperature": as_number(self.temperature, "temperature"),
            "top_k": as_whole(self.top_k, "top-k"),
            "top_p": as_number(self.top_p, "top-p"),
            "min_p": as_number(self.min_p, "min-p"),
            "repetition_penalty": as_number(self.repetition_penalty, "repetition penalty"),
        }
        validate_settings(SamplingSettings(**values))  # the engine's own message for a bad value
        notes = []
        for name, (label, low, high, _, _) in SLIDERS.items():
            used = min(max(values[name], low), high)
            if used != values[name]:
                typed = f"{label} {values[name]:g}"
                notes.append(f"{typed} is outside its range {low:g}–{high:g}: used {used:g}.")
                values[name] = used
        return SamplingSettings(**values), notes

    def request(self, messages: list[Message], system_prompt: str | None = None) -> ChatRequest:
        """The engine request (system_prompt: instead of this column's); every bad value is named."""
        settings, notes = self.settings()
        max_new = as_whole(self.max_new_tokens, "max new tokens")
        system = self.system_prompt if system_prompt is None else system_prompt
        seed = parse_seed(self.seed)
        return ChatRequest(messages, system or "", settings, max_new, seed, notes=tuple(notes))


# The link and trace fields: every control but the display toggle.
CONTROLS = [f.name for f in fields(ChatControls) if f.name != "show_template"]
# name: (label, minimum, maximum, step, tooltip). The engine accepts wider values (through the
# API or a link); ChatControls.settings brings them into these ranges and says so.
SLIDERS: dict[str, tuple[str, float, float, float, str]] = {
    "temperature": (
        "Temperature",
        0,
        2,
        0.05,
        "Divides the logits: <1 sharper, >1 flatter; 0 = greedy (always the top token)",
    ),
    "top_k": ("Top-k", 0, 200, 1, "Keep only the k most likely tokens; 0 = off"),
    "top_p": (
        "Top-p",
        0.01,
        1,
        0.01,
        "Keep the most likely tokens until their probabilities sum to p; 1 = off",
    ),
    "min_p": (
        "Min-p",
        0,
        1,
        0.01,
        "Drop tokens less likely than min-p × the top token's probability; 0 = off",
    ),
    "repetition_penalty": (
        "Repetition penalty",
        0.5,
        2,
        0.05,
        "Divides the score of tokens already in the text; >1 discourages repeats",
    ),
}


def build_controls(engine: Engine, settings: Settings) -> dict[str, Any]:
    """System prompt, sampling settings, max tokens, seed, template toggle."""
    template_note = "" if engine.has_chat_template else " (this model has no chat template: unused)"
    default = ChatControls()
    w: dict[str, Any] = {}
    w["system_prompt"] = gr.Textbox(
        default.system_prompt,
        label="System prompt",
        lines=2,
        placeholder="(the model's own default)",
        elem_classes=["stage-hide"],
        info="Instructions the model sees before the conversation; empty = the model's default"
        + template_note,
    )
    with gr.Accordion("Sampling", open=True):
        for name, (label, low, high, step, info) in SLIDERS.items():
            w[name] = UncheckedSlider(
                low,
                high,
                value=getattr(default, name),
                step=step,
                label=label,
                info=info,
                elem_classes=[] if name == "temperature" else ["stage-hide"],
            )
        limit = settings.max_new_tokens_limit
        w["max_new_tokens"] = UncheckedSlider(
            1,
            limit,
            value=min(default.max_new_tokens, limit),
            step=1,
            label="Max new tokens",
            info="Longest answer, in tokens",
            elem_classes=["stage-hide"],
        )
        w["seed"] = gr.Textbox(
            default.seed,
            label="Seed",
            placeholder="random",
            info="Same seed + same settings = same answer; empty = a new random seed each time",
            elem_classes=["stage-hide"],
            elem_id="chat-seed",
        )
    w["show_template"] = gr.Checkbox(
        default.show_template,
        label="Show templated token stream",
        info="The exact tokens the model sees, special tokens included",
        elem_classes=["stage-hide"],
    )
    return w
