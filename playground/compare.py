"""Two sides answer the same conversation at once: two models, or one model with other settings.

    sides = [Side(smol), Side(gemma, SamplingSettings(temperature=0.7), seed=1)]
    for update in stream_compare(sides, [{"role": "user", "content": "Why is the sky blue?"}]):
        left, right = update.sides            # each side's ChatUpdate so far, or its error
    update.parting                            # the first character where the two answers differ

Each side is a `stream_chat` of its own engine in its own thread, so the two answers stream side by
side (and, on one model, join its running batch together). Each side's answer is the one it gives
alone: same engine, settings and seed, same tokens. A side that fails (a bad setting for that model,
a remote engine that is down) says why in its `error`, and the other side goes on. Cross-scoring
(each answer scored by the other model) is playground.scoring.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from playground.chat import ChatRequest, ChatUpdate, stream_chat
from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.prompts import Message
from playground.engine.sampling import SamplingSettings
from playground.errors import PlaygroundError
from playground.messages import Message as Text  # engine text with its key (Message here: a chat turn)

__all__ = ["CompareUpdate", "Side", "SideState", "first_difference", "run_compare", "stream_compare"]


@dataclass(frozen=True)
class Side:
    """One side of a comparison: an engine and how it answers."""

    engine: Engine
    settings: SamplingSettings = field(default_factory=SamplingSettings)
    seed: int | None = None
    system_prompt: str = ""
    label: str = ""  # how the side is named ('' = the engine's name)

    @property
    def name(self) -> str:
        return self.label or self.engine.name


@dataclass
class SideState:
    """One side's answer so far."""

    name: str
    update: ChatUpdate | None = None  # None until its first progress or token
    error: str | Text = ""  # why the side stopped, a Message the UI says in its language ('': none)
    done: bool = False

    @property
    def text(self) -> str:
        return self.update.text if self.update is not None else ""


@dataclass
class CompareUpdate:
    """Both sides after the latest event (the same objects, updated in place: copy what you keep)."""

    sides: list[SideState]

    @property
    def finished(self) -> bool:
        return all(side.done for side in self.sides)

    @property
    def parting(self) -> int | None:
        """The first character where the two answers differ (None while one is still a prefix of the
        other; at the end, the shorter one's length when only the lengths differ)."""
        a, b = (side.text for side in self.sides)
        return first_difference(a, b, ended=self.finished)


def first_difference(a: str, b: str, *, ended: bool = True) -> int | None:
    """The index of the first character where a and b differ; None where they agree. While the texts
    still grow (ended=False), one being a prefix of the other is agreement so far."""
    common = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    if common < min(len(a), len(b)):
        return common
    return common if ended and len(a) != len(b) else None


def stream_compare(
    sides: Sequence[Side],
    messages: Sequence[Message],
    *,
    max_new_tokens: int = 256,
    max_new_tokens_limit: int = 1024,
    control: Control | None = None,
) -> Iterator[CompareUpdate]:
    """Both sides answer `messages` at once; yields after every event of either side (see the module
    docstring). Stop (control.cancel(), or closing the iterator) stops both."""
    if len(sides) != 2:
        raise PlaygroundError(f"A comparison has two sides, got {len(sides)}.")
    control = control or Control()
    events: queue.Queue[tuple[int, ChatUpdate | BaseException | None]] = queue.Queue()
    controls = [Control() for _ in sides]
    state = CompareUpdate([SideState(side.name) for side in sides])
    for index, side in enumerate(sides):
        request = ChatRequest(list(messages), side.system_prompt, side.settings, max_new_tokens, side.seed)
        _start_side(index, side.engine, request, max_new_tokens_limit, controls[index], events)
    try:
        while not state.finished:
            index, event = _next_event(events, control, controls)
            _apply(state.sides[index], event)
            yield state
    finally:
        for side_control in controls:  # the consumer stopped listening: both sides stop
            side_control.cancel()


def run_compare(sides: Sequence[Side], messages: Sequence[Message], **options: int) -> CompareUpdate:
    """The last update of stream_compare: both answers, finished."""
    *_, last = stream_compare(sides, messages, **options)
    return last


def _start_side(
    index: int,
    engine: Engine,
    request: ChatRequest,
    limit: int,
    control: Control,
    events: queue.Queue,
) -> None:
    """One side's stream_chat in a thread: each update, then None at its end (or the error)."""

    def work() -> None:
        try:
            for update in stream_chat(engine, request, limit, control=control):
                events.put((index, replace(update, tokens=list(update.tokens), notes=list(update.notes))))
            events.put((index, None))
        except BaseException as exc:  # handed to the consumer: this side stops, the other goes on
            events.put((index, exc))

    threading.Thread(target=work, name=f"compare side {index}", daemon=True).start()


def _next_event(
    events: queue.Queue, control: Control, controls: list[Control]
) -> tuple[int, ChatUpdate | BaseException | None]:
    """The next event of either side; a Stop on the comparison reaches both sides."""
    while True:
        if control.cancelled:
            for side_control in controls:
                side_control.cancel()
        try:
            return events.get(timeout=0.2)
        except queue.Empty:
            continue


def _apply(side: SideState, event: ChatUpdate | BaseException | None) -> None:
    if isinstance(event, ChatUpdate):
        side.update = event
        return
    side.done = True
    if isinstance(event, PlaygroundError):  # Stop included: "Stopped: ..."
        side.error = event.message
    elif isinstance(event, BaseException):
        side.error = f"{side.name} failed: {type(event).__name__}: {str(event)[:300]}"
