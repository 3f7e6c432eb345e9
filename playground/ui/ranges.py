"""Number boxes and sliders whose ranges speak for themselves: a value outside a control's range is
named with the control and its range, never changed without a word, and never a server traceback.

Gradio checks a Number's or a Slider's minimum and maximum itself, before the handler runs: its
message ("Value -5 is less than minimum value 1.") names neither the control nor its range, is
English on a Chinese page, and comes with a traceback in the server's console for a user's typing
slip. In the browser, a slider's number box brings a typed value into range when it loses focus,
silently. Here:
- `CheckedNumber` and `CheckedSlider` hand their value over as sent and check it in the handler's
  wrapper (common.py `checked_inputs`, every `connect`ed event): a value outside the range, or no
  number, is refused by name (a PlaygroundError: a toast in the page's language, no traceback);
  `UncheckedNumber` leaves it to a handler that explains it itself (the KV calculator, inline);
- `say_when_clamped(demo)` makes every slider of the app say when its box changed a typed value.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.errors import PlaygroundError
from playground.messages import Message
from playground.ui.common import as_number, as_whole, warn
from playground.ui.i18n import DEFAULT, localize, session_lang, t


def control_name(component: Any) -> str:
    """A control's label as a message names it: a translated label (i18n) as a Message, said in the
    page's language; an English one with a capital first letter ('early exit: k layers')."""
    label = component.label
    key = getattr(label, "key", None)  # gradio's I18nData
    if key:
        return Message.of_key(key, t(key, DEFAULT))
    text = str(label or "") or t("shared.range.value", DEFAULT)
    return text[:1].upper() + text[1:]


def range_text(low: float | None, high: float | None) -> str:
    """'1–512', 'at least 1' or 'at most 8' (a Message where words are needed)."""
    if low is not None and high is not None:
        return f"{low:g}–{high:g}"
    if low is not None:
        return Message("shared.range.at_least", "at least {low:g}", low=low)
    return Message("shared.range.at_most", "at most {high:g}", high=high)


def outside(value: float, low: float | None, high: float | None) -> bool:
    return (low is not None and value < low) or (high is not None and value > high)


def checked_value(component: gr.Number | gr.Slider, value: Any) -> Any:
    """A Number's or Slider's value as the handler gets it: a whole number where its precision is 0,
    inside its range; anything else is refused, naming the control, the value and the range."""
    if value is None:
        return None
    name = control_name(component)
    number = as_whole(value, name) if component.precision == 0 else as_number(value, name)
    low, high = component.minimum, component.maximum
    if outside(number, low, high):
        raise PlaygroundError(
            "{label} {value:g} is outside its range {range}.",
            key="shared.range.outside",
            label=name,
            value=number,
            range=range_text(low, high),
        )
    return number


class RangeChecked:
    """A control that hands its value over as sent (no Gradio check) and checks it in the handler's
    wrapper (common.checked_inputs), in the page's language."""

    def preprocess(self, payload: Any) -> Any:
        return payload

    def checked(self, value: Any) -> Any:
        return checked_value(self, value)  # type: ignore[arg-type]


class CheckedNumber(RangeChecked, gr.Number):
    """A number box whose value outside its range (or not a number) is refused by name."""

    def get_block_name(self) -> str:
        return "number"


class CheckedSlider(RangeChecked, gr.Slider):
    """A slider whose value outside its range (through the API, or a link) is refused by name."""

    def get_block_name(self) -> str:
        return "slider"


class UncheckedNumber(gr.Number):
    """A number box whose value reaches the handler as sent: the handler explains a bad one itself
    (the KV calculator: inline, next to the last good result)."""

    def get_block_name(self) -> str:
        return "number"

    def preprocess(self, payload: Any) -> Any:
        return payload


def clamp_message(component: gr.Slider, typed: Any, lang: str = DEFAULT) -> str | None:
    """What a slider's box did to a typed value outside its range, in lang (None when it was inside)."""
    try:
        value = float(typed)
    except (TypeError, ValueError):
        return None
    low, high = component.minimum, component.maximum
    if not outside(value, low, high):
        return None
    name, where = localize(control_name(component), lang), localize(range_text(low, high), lang)
    return t(
        "shared.range.clamped", lang, label=name, value=value, range=where, used=min(max(value, low), high)
    )


def range_set_by_handler(slider: gr.Slider) -> gr.Slider:
    """Mark a slider whose range a handler changes (say_when_clamped leaves it to that handler,
    which knows the range of the moment and says what it did)."""
    slider.range_set_by_handler = True  # type: ignore[attr-defined]
    return slider


def say_when_clamped(demo: gr.Blocks) -> None:
    """Every slider of the app: its number box brings a typed value into range when it loses focus,
    and its release event still carries the typed value; say what was changed (a toast)."""
    quiet = {"api_visibility": "private", "show_progress": "hidden", "concurrency_limit": None}
    for block in list(demo.blocks.values()):
        if isinstance(block, gr.Slider) and not getattr(block, "range_set_by_handler", False):
            block.release(_clamp_noter(block), None, None, **quiet)


def _clamp_noter(slider: gr.Slider) -> Any:
    def released(event: gr.EventData, request: gr.Request = None) -> None:
        message = clamp_message(slider, getattr(event, "_data", None), session_lang(request))
        if message:
            warn(message, session_lang(request))

    return released
