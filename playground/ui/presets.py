"""Example inputs of the Chat, Step by step and Beam search tabs: the English ones and the Chinese
ones of the texts this playground teaches from (今天天气很好, the chain rule's example; a question).

A preset fills its tab's input (Step by step starts it, and forces the chain rule's text token by
token so that its ledger is P(今天)·P(天气|今天)·P(很好|今天天气)). On a model that writes Chinese as
byte tokens (SmolLM2: 今天天气很好 is 13 of them) the view says so, and names the model that reads it
as words (Gemma 3 270M: 今天 | 天气 | 很好).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground.engine.base import Engine
from playground.engine.embedded import EMBEDDED_MODELS
from playground.engine.tokens import byte_pieces
from playground.messages import Message
from playground.ui.i18n import i18n

CHINESE_QUESTION = "中国的首都是哪个城市？答："  # a base model answers after 答 (answer): 北京。
CHAIN_RULE_TEXT = "今天天气很好"
WORDS_MODEL = "gemma-3-270m"  # the embedded model that reads Chinese as words
_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class Preset:
    """One example: its button (a label key, or its text as the label), the text it puts in the tab's
    input, and (Step by step) text forced after that prompt."""

    name: str  # its id: the button is preset-<tab>-<name>
    text: str
    label: str = ""  # an i18n key; "" shows the text itself (a prompt reads the same in every language)
    force: str = ""


PRESETS: dict[str, tuple[Preset, ...]] = {
    "chat": (
        Preset("capital", "What is the capital of France?"),
        Preset("capital_zh", CHINESE_QUESTION),
    ),
    "step": (
        Preset("capital", "The capital of France is"),
        Preset("chain_rule", "", label="preset.chain_rule", force=CHAIN_RULE_TEXT),
        Preset("capital_zh", CHINESE_QUESTION),
    ),
    "beam": (
        Preset("beam", "The best thing about beam search is"),
        Preset("capital_zh", CHINESE_QUESTION),
    ),
}


def preset(tab: str, name: str) -> Preset:
    return next(p for p in PRESETS[tab] if p.name == name)


def build_presets(tab: str) -> dict[str, Any]:
    """A row of the tab's examples (call inside its layout): {"preset_<name>": button}."""
    buttons: dict[str, Any] = {}
    # On stage the examples give way to the tab's main view (the presenter types, or uses a link)
    with gr.Row(elem_classes=["preset-row", "stage-hide"], elem_id=f"presets-{tab}"):
        gr.Markdown(i18n("preset.label"), elem_classes=["preset-label"])
        for p in PRESETS[tab]:
            label = i18n(p.label) if p.label else p.text
            buttons[f"preset_{p.name}"] = gr.Button(
                label, size="sm", min_width=60, scale=0, elem_id=f"preset-{tab}-{p.name}"
            )
    return buttons


def chinese_note(engine: Engine, text: str) -> Message | None:
    """What to say with Chinese text on a model that writes it as byte tokens (None: it has none, or
    the model reads it as words): how many of its tokens are bytes, and which model reads it better."""
    if not _HAN.search(text or ""):
        return None
    tokens, pieces = byte_pieces(engine.tokenizer, text)
    if pieces == 0:
        return None
    words = EMBEDDED_MODELS[WORDS_MODEL]
    if words.installed:
        hint = Message(
            "preset.bytes.installed",
            "Gemma 3 270M, installed here, reads Chinese as words (今天 | 天气 | 很好): pick {name} in "
            "the model list at the top.",
            name=words.name,
        )
    else:
        hint = Message(
            "preset.bytes.install",
            "Gemma 3 270M reads Chinese as words (今天 | 天气 | 很好): `{install}`, then pick {name} in "
            "the model list at the top.",
            install=words.install,
            name=words.name,
        )
    return Message(
        "preset.bytes",
        "{model} writes Chinese as byte tokens: this text is {tokens} tokens here, {pieces} of them pieces "
        "of characters. {hint}",
        model=engine.name.partition(" (")[0],
        tokens=tokens,
        pieces=pieces,
        hint=hint,
    )
