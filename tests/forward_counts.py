"""Count the tokens an engine forwards, on its own path or in its running batch."""

from __future__ import annotations

from typing import Any

from playground.engine.local import LocalEngine


def count_forwards(monkeypatch: Any, engine: LocalEngine) -> list[int]:
    """A list that gets the number of new tokens of every forward the engine runs for a sequence
    (its own chunked forward, or its share of an iteration of the running batch) until the test ends."""
    calls: list[int] = []
    piece = engine._piece
    monkeypatch.setattr(engine, "_piece", lambda c, ids, keep: calls.append(len(ids)) or piece(c, ids, keep))
    if engine.batcher is not None:
        iteration = engine.batcher._forward
        monkeypatch.setattr(
            engine.batcher,
            "_forward",
            lambda plan, on_oom: calls.extend(n for _, n in plan) or iteration(plan, on_oom),
        )
    return calls
