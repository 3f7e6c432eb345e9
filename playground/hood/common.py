"""The lesson contract of "Under the hood", and the helpers every lesson shares.

A lesson named <name> is the module `playground.hood.<name>` with (one rule for all of them):
- `run(lm, ...)`, which returns its result, and `iter_run(lm, ..., control=)`, which yields that
  result as it fills (for live plots and progress) and returns it; Stop is a `Control` passed in
  and cancelled. Helpers a lesson also offers keep their own names (`attention.attention_maps`);
- `LESSON = Lesson("<name>", ...)`: its name, title, what it needs from the engine, and `iter_run`.

The result is a dataclass of plain numbers and ids: what the lesson measured. The UI (ui/hood/)
draws it and records what it drew as the trace (ui/hood/record.py); nothing here imports gradio.
Adding a lesson: its module here, its figures in plots/hood/, its view in ui/hood/, and one line
in each registry (this package's LESSONS, ui/hood's VIEWS).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.protocols import Probes
from playground.errors import PlaygroundError
from playground.messages import Message


@dataclass(frozen=True)
class Lesson:
    """One lesson: what it is called, what it needs from the engine, how to run it."""

    name: str  # its module playground.hood.<name> ("kv_on_off"); its API is /hood_<name>
    title: Message  # one short label ("KV cache on vs off"), said in the page's language by the UI
    # engine capabilities it needs (Capabilities fields: "probes" = timed direct forwards in this
    # process, "attentions", "hidden_states", "cache_bytes", "batched")
    needs: tuple[str, ...]
    run: Callable[..., Iterator[Any]]  # the iter_ function: yields the result as it fills, returns it

    def missing(self, lm: Engine) -> str | None:
        """Why this engine cannot run the lesson (None: it can)."""
        try:
            require(lm, *self.needs)
        except PlaygroundError as exc:
            return exc.message
        return None


def require(lm: Engine, *needs: str) -> Probes:
    """The engine's probes, after refusing (with the engine's one-line reason) what it cannot do."""
    capabilities = lm.capabilities
    for need in ("probes", *needs):
        if not getattr(capabilities, need, False):
            if need == "probes":
                _no_probes(lm)
            raise PlaygroundError(capabilities.why_not(need))
    if lm.probes is None:
        raise PlaygroundError(
            "The {kind} engine has no direct forwards for the lessons.",
            key="hood.error.no_forwards",
            kind=lm.kind,
        )
    return lm.probes


def _no_probes(lm: Engine) -> None:
    """Refuse a lesson on an engine without direct forwards: its own reason, or ours."""
    reason = lm.capabilities.reasons.get("probes")
    if reason:
        raise PlaygroundError(reason)
    raise PlaygroundError(
        "This lesson runs and times the model's own forward passes, which the {kind} engine does not "
        "expose: start the app with an in-process model (without --engine).",
        key="hood.error.no_probes",
        kind=lm.kind,
    )


NEW_TOKENS = Message("hood.name.new_tokens", "New tokens")  # a setting most lessons have


def whole_in_range(value: Any, low: int, high: int, what: str) -> int:
    """An int in [low, high], or a PlaygroundError naming what (a Message: said in the page's
    language) and the allowed range."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PlaygroundError(
            "{what} must be a whole number from {low} to {high}, got {value!r}.",
            key="hood.error.whole_in_range",
            what=what,
            low=low,
            high=high,
            value=value,
        )
    return value


def fits_context(lm: Engine, prompt_tokens: int, new_tokens: int) -> None:
    """Refuse a run whose prompt plus new tokens exceed the model's context."""
    if prompt_tokens + new_tokens > lm.context_length:
        raise PlaygroundError(
            "{prompt} + {new} tokens is more than the context of {context}.",
            key="hood.error.past_context",
            prompt=prompt_tokens,
            new=new_tokens,
            context=lm.context_length,
        )


class Stopwatch:
    """Seconds of a request's own work: wall time since start, minus the time it waited for the
    shared model (other requests) and the time it was paused (a consumer drawing a progress
    update between two steps)."""

    def __init__(self, control: Control) -> None:
        self.control = control
        self.started = time.perf_counter()
        self.excluded = -control.wait_seconds

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started - self.excluded - self.control.wait_seconds

    @contextmanager
    def paused(self) -> Iterator[None]:
        stopped = time.perf_counter()
        try:
            yield
        finally:
            self.excluded += time.perf_counter() - stopped


# Ordinary English prose, repeated to make long prompts of any length.
LONG_TEXT = (
    "The history of the printing press begins long before Gutenberg. Carved wooden blocks were inked "
    "and pressed onto paper in China, and movable type made of clay and later metal followed in China "
    "and Korea. In Europe, around 1440, a goldsmith from Mainz combined a screw press, oil-based ink and "
    "type cast from a lead alloy in a hand mould. Books that had taken a scribe a year to copy could now "
    "be printed by the hundred in weeks, and within fifty years presses were working in more than two "
    "hundred cities. Prices fell, literacy rose, and ideas travelled faster than any ruler could stop "
    "them. Scholars could compare identical copies of a text, errors stopped multiplying with every copy, "
    "and the pamphlet became a weapon in every religious and political quarrel of the age. "
)


def preset_ids(tokenizer: Any, length: int) -> list[int]:
    """`length` token ids of ordinary prose (the tokenizer's start token first where it adds one)."""
    if length < 1:
        raise PlaygroundError(
            "A prompt needs at least 1 token, got {length}.", key="hood.error.prompt_length", length=length
        )
    ids = list(tokenizer(LONG_TEXT, add_special_tokens=True).input_ids)
    body = list(tokenizer(" " + LONG_TEXT, add_special_tokens=False).input_ids)
    while len(ids) < length:
        ids += body
    return ids[:length]
