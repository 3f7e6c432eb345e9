"""Number boxes and sliders whose ranges speak for themselves: a value outside a control's range is
named with the control and its range, never changed without a word, and never a server traceback.

Gradio checks a Number's or a Slider's minimum and maximum itself, before the handler runs: its
message ("Value -5 is less than minimum value 1.") names neither the control nor its range, and it
prints a traceback in the server's console for a user's typing slip. In the browser, a slider's
number box brings a typed value into range when it loses focus, silently. Here:
- `CheckedNumber` and `CheckedSlider` refuse such a value with a toast that names them, and no
  traceback (`UncheckedNumber` hands it to a handler that explains it itself, inline);
- `say_when_clamped(demo)` makes every slider of the app say when its box changed a typed value.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.errors import PlaygroundError
from playground.ui.common import as_number, as_whole

# The strings this module shows (one place, for the translation to come).
OUTSIDE = "{label} {value:g} is outside its range {range}."
CLAMPED = "{label} {value:g} is outside its range {range}: set to {used:g}."
AT_LEAST = "at least {low:g}"
AT_MOST = "at most {high:g}"
VALUE = "Value"  # a control with no label


def named(label: str | None) -> str:
    """A control's label as a message starts it ('early exit: k layers' -> 'Early exit: k layers')."""
    text = label or VALUE
    return text[:1].upper() + text[1:]


def range_text(low: float | None, high: float | None) -> str:
    """'1–512', 'at least 1' or 'at most 8'."""
    if low is not None and high is not None:
        return f"{low:g}–{high:g}"
    return AT_LEAST.format(low=low) if low is not None else AT_MOST.format(high=high)


def outside(value: float, low: float | None, high: float | None) -> bool:
    return (low is not None and value < low) or (high is not None and value > high)


def clamp_message(label: str, typed: Any, low: float, high: float) -> str | None:
    """What a slider's box did to a typed value outside its range (None when it was inside)."""
    try:
        value = float(typed)
    except (TypeError, ValueError):
        return None
    if not outside(value, low, high):
        return None
    used = min(max(value, low), high)
    return CLAMPED.format(label=label, value=value, range=range_text(low, high), used=used)


def checked_value(component: gr.Number | gr.Slider, payload: Any) -> Any:
    """A Number's or Slider's value as the handler gets it: a whole number where its precision is 0,
    inside its range; anything else is refused (a toast naming it, no traceback)."""
    if payload is None:
        return None
    label = named(component.label)
    try:
        value = as_whole(payload, label) if component.precision == 0 else as_number(payload, label)
    except PlaygroundError as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    low, high = component.minimum, component.maximum
    if outside(value, low, high):
        message = OUTSIDE.format(label=label, value=value, range=range_text(low, high))
        raise gr.Error(message, print_exception=False)
    return value


class CheckedNumber(gr.Number):
    """A number box whose value outside its range (or not a number) is refused by name."""

    def get_block_name(self) -> str:
        return "number"

    def preprocess(self, payload: float | None) -> float | int | None:
        return checked_value(self, payload)


class UncheckedNumber(gr.Number):
    """A number box whose value reaches the handler as typed: the handler explains a bad one
    itself (the KV calculator: inline, next to the last good result)."""

    def get_block_name(self) -> str:
        return "number"

    def preprocess(self, payload: Any) -> Any:
        return payload


class CheckedSlider(gr.Slider):
    """A slider whose value outside its range (through the API, or a link) is refused by name."""

    def get_block_name(self) -> str:
        return "slider"

    def preprocess(self, payload: float) -> float:
        return checked_value(self, payload)


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
    label, low, high = named(slider.label), slider.minimum, slider.maximum

    def released(event: gr.EventData) -> None:
        message = clamp_message(label, getattr(event, "_data", None), low, high)
        if message:
            gr.Warning(message)

    return released
