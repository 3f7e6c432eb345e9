"""The Chat tab's settings column: its components, their ranges and defaults, and their values
as one `ChatControls` (a handler parameter annotated with it stands for all of them, see
ui/common.py `connect`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import gradio as gr

from playground.chat import ChatRequest
from playground.engine import prompts
from playground.engine.base import Engine
from playground.engine.sampling import SamplingSettings, validate_settings
from playground.messages import Message
from playground.settings import Settings
from playground.ui.common import UncheckedSlider, as_number, as_whole, parse_seed
from playground.ui.i18n import i18n, t

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
            "temperature": as_number(self.temperature, slider_name("temperature")),
            "top_k": as_whole(self.top_k, slider_name("top_k")),
            "top_p": as_number(self.top_p, slider_name("top_p")),
            "min_p": as_number(self.min_p, slider_name("min_p")),
            "repetition_penalty": as_number(self.repetition_penalty, slider_name("repetition_penalty")),
        }
        validate_settings(SamplingSettings(**values))  # the engine's own message for a bad value
        notes = []
        for name, (_, low, high, _, _) in SLIDERS.items():
            used = min(max(values[name], low), high)
            if used != values[name]:
                notes.append(
                    Message(
                        "chat.note.clamped",
                        "{label} {value:g} is outside its range {low:g}–{high:g}: used {used:g}.",
                        label=slider_name(name),
                        value=values[name],
                        low=low,
                        high=high,
                        used=used,
                    )
                )
                values[name] = used
        return SamplingSettings(**values), notes

    def request(self, messages: list[prompts.Message], system_prompt: str | None = None) -> ChatRequest:
        """The engine request (system_prompt: instead of this column's); every bad value is named."""
        settings, notes = self.settings()
        max_new = as_whole(self.max_new_tokens, Message.of_key("chat.max_new_tokens", "Max new tokens"))
        system = self.system_prompt if system_prompt is None else system_prompt
        seed = parse_seed(self.seed)
        return ChatRequest(messages, system or "", settings, max_new, seed, notes=tuple(notes))


# The link and trace fields: every control but the display toggle.
CONTROLS = [f.name for f in fields(ChatControls) if f.name != "show_template"]
# name: (label key, minimum, maximum, step, tooltip key). The engine accepts wider values (through
# the API or a link); ChatControls.settings brings them into these ranges and says so.
SLIDERS: dict[str, tuple[str, float, float, float, str]] = {
    "temperature": ("chat.temperature", 0, 2, 0.05, "chat.temperature.info"),
    "top_k": ("chat.top_k", 0, 200, 1, "chat.top_k.info"),
    "top_p": ("chat.top_p", 0.01, 1, 0.01, "chat.top_p.info"),
    "min_p": ("chat.min_p", 0, 1, 0.01, "chat.min_p.info"),
    "repetition_penalty": ("chat.repetition_penalty", 0.5, 2, 0.05, "chat.repetition_penalty.info"),
}


def slider_name(name: str) -> Message:
    """A sampling slider's label as a message names it (said in the page's language)."""
    key = SLIDERS[name][0]
    return Message.of_key(key, t(key, "en"))


def build_controls(engine: Engine, settings: Settings) -> dict[str, Any]:
    """System prompt, sampling settings, max tokens, seed, template toggle."""
    default = ChatControls()
    w: dict[str, Any] = {}
    w["system_prompt"] = gr.Textbox(
        default.system_prompt,
        label=i18n("chat.system_prompt"),
        lines=2,
        placeholder=i18n("chat.system_prompt.placeholder"),
        elem_classes=["stage-hide"],
        info=i18n("chat.system_prompt.info" if engine.has_chat_template else "chat.system_prompt.unused"),
    )
    with gr.Accordion(i18n("chat.sampling"), open=True):
        for name, (label, low, high, step, info) in SLIDERS.items():
            w[name] = UncheckedSlider(
                low,
                high,
                value=getattr(default, name),
                step=step,
                label=i18n(label),
                info=i18n(info),
                elem_classes=[] if name == "temperature" else ["stage-hide"],
            )
        limit = settings.max_new_tokens_limit
        w["max_new_tokens"] = UncheckedSlider(
            1,
            limit,
            value=min(default.max_new_tokens, limit),
            step=1,
            label=i18n("chat.max_new_tokens"),
            info=i18n("chat.max_new_tokens.info"),
            elem_classes=["stage-hide"],
        )
        w["seed"] = gr.Textbox(
            default.seed,
            label=i18n("chat.seed"),
            placeholder=i18n("chat.seed.placeholder"),
            info=i18n("chat.seed.info"),
            elem_classes=["stage-hide"],
            elem_id="chat-seed",
        )
    w["show_template"] = gr.Checkbox(
        default.show_template,
        label=i18n("chat.show_template"),
        info=i18n("chat.show_template.info"),
        elem_classes=["stage-hide"],
    )
    return w
