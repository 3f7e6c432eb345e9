"""Why not all at once: Jacobi (parallel) decoding against plain autoregressive decoding.

    result = run(engine, prompt_ids, 8)
    result.rounds[0].ids     # the first parallel guess: every position from a wrong context
    [r.final for r in result.rounds]   # leading positions equal to greedy: 1, 2, ... (never less)
    result.ids == result.greedy_ids    # True: the fixed point IS the greedy answer

Jacobi decoding fills `n` future positions (the canvas) with a guess, then each round runs ONE
forward over the canvas (against the prompt's KV cache) and replaces every position with the
model's greedy choice after the canvas before it. Position i depends on positions < i, so it is
right once they are: the first position is right after round 1, and each round fixes at least one
more. It stops when a round's output agrees with its input on every position but the last (the
canvas is then a fixed point: the next round would change nothing), after at most n rounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from playground.engine.base import Engine
from playground.engine.control import Control, run_to_end
from playground.engine.probes import Picker, greedy_picker
from playground.engine.protocols import ProbeSequence
from playground.engine.tokens import check_token_id, common_prefix
from playground.errors import PlaygroundError
from playground.hood.common import Lesson, fits_context, require, whole_in_range
from playground.messages import Message

__all__ = ["GUESSES", "LESSON", "MAX_TOKENS", "JacobiResult", "JacobiRound", "iter_run", "run"]

MAX_TOKENS = 64  # positions decoded in parallel
# the starting canvas: every position gets the same token
GUESSES = {
    "the": "“ the” everywhere",  # a common word (the prompt's last token where “ the” is not one token)
    "last": "the prompt's last token",
    "first": "the first greedy token",
}


@dataclass(frozen=True)
class JacobiRound:
    """One parallel forward over the canvas: what it wrote and what is right."""

    ids: list[int]  # the canvas after this round (n token ids)
    final: int  # leading positions equal to the greedy answer: right, and never to change again
    settled: int  # leading positions the round itself proves right (its input agreed before them)
    changed: int  # positions this round changed
    seconds: float  # model time of the forward (n + 1 tokens against the cached prompt)


@dataclass
class JacobiResult:
    """Jacobi decoding of n tokens beside plain greedy decoding (one token per forward), same run."""

    prompt_tokens: int
    n: int
    eos: tuple[int, ...]  # the ids that end an answer (ids and greedy_ids stop after one)
    guess: list[int] = field(default_factory=list)  # the starting canvas (n ids)
    rounds: list[JacobiRound] = field(default_factory=list)
    reference: list[int] = field(default_factory=list)  # greedy, n tokens (on past an end token)
    prefill_seconds: float = 0.0  # reading the prompt once (both decoders start from its cache)
    step_seconds: list[float] = field(default_factory=list)  # greedy: each one-token decode step
    phase: str = ""  # what was just done (progress text)

    @property
    def ids(self) -> list[int]:
        """The last canvas, up to and including an end token."""
        return _cut_at_eos(self.rounds[-1].ids, self.eos) if self.rounds else []

    @property
    def greedy_ids(self) -> list[int]:
        """Plain greedy decoding (what `generate(do_sample=False, max_new_tokens=n)` returns)."""
        return _cut_at_eos(self.reference, self.eos)

    @property
    def identical(self) -> bool:
        return bool(self.rounds) and self.ids == self.greedy_ids

    @property
    def round_seconds(self) -> float:
        """Median model time of one Jacobi round (nan before the first)."""
        return statistics.median(r.seconds for r in self.rounds) if self.rounds else float("nan")

    @property
    def ar_step_seconds(self) -> float:
        """Median model time of one autoregressive decode step (nan with n = 1: no step)."""
        return statistics.median(self.step_seconds) if self.step_seconds else float("nan")

    @property
    def jacobi_seconds(self) -> float:
        return sum(r.seconds for r in self.rounds)

    @property
    def greedy_seconds(self) -> float:
        """The n greedy tokens after the prefill: the first comes with it, then n - 1 steps."""
        return sum(self.step_seconds)


def run(
    lm: Engine,
    prompt_ids: Sequence[int],
    n: int,
    guess: str | Sequence[int] = "the",
    control: Control | None = None,
) -> JacobiResult:
    """Decode n tokens after prompt_ids by Jacobi iteration, and by plain greedy decoding to
    compare (see the module docstring and JacobiResult). guess: a GUESSES key or n token ids."""
    return run_to_end(iter_run(lm, prompt_ids, n, guess, control))


def iter_run(
    lm: Engine,
    prompt_ids: Sequence[int],
    n: int,
    guess: str | Sequence[int] = "the",
    control: Control | None = None,
) -> Iterator[JacobiResult]:
    """run, yielding the result after every greedy step and every Jacobi round."""
    probes = require(lm)
    prompt = list(prompt_ids)
    if not prompt:
        raise PlaygroundError(
            "The prompt is empty: type some text to continue.", key="hood.error.empty_prompt"
        )
    whole_in_range(n, 1, MAX_TOKENS, Message("hood.name.parallel", "Tokens decoded in parallel"))
    fits_context(lm, len(prompt), n)
    if not isinstance(guess, str):
        _check_canvas(lm, guess, n)
    elif guess not in GUESSES:
        raise PlaygroundError(
            "Unknown starting guess {guess!r}: use one of {guesses} or n token ids.",
            key="hood.jacobi.error.guess",
            guess=guess,
            guesses=", ".join(GUESSES),
        )
    result = JacobiResult(len(prompt), n, tuple(lm.eos_token_ids))
    sequence, pick = probes.sequence(control=control), greedy_picker(lm, prompt)
    yield from _greedy(sequence, pick, prompt, result)
    result.guess = starting_canvas(lm, prompt, n, guess, result.reference[0])
    yield from _rounds(sequence, pick, prompt, result)
    return result


def starting_canvas(
    lm: Engine, prompt: list[int], n: int, guess: str | Sequence[int], first: int
) -> list[int]:
    """The canvas before round 1 (first: the first greedy token, for guess="first")."""
    if not isinstance(guess, str):
        return [int(t) for t in guess]
    if guess == "first":
        return [first] * n
    the = lm.tokenizer(" the", add_special_tokens=False).input_ids
    token = the[0] if guess == "the" and len(the) == 1 else prompt[-1]
    return [token] * n


def _check_canvas(lm: Engine, guess: Sequence[int], n: int) -> None:
    if len(guess) != n:
        raise PlaygroundError(
            "A starting canvas needs one token per position ({n}), got {count}.",
            key="hood.jacobi.error.canvas",
            n=n,
            count=len(guess),
        )
    for token in guess:
        check_token_id(token, lm.vocab_size)


def _greedy(
    sequence: ProbeSequence, pick: Picker, prompt: list[int], result: JacobiResult
) -> Iterator[JacobiResult]:
    """Plain greedy decoding: the prompt read once (its cache is kept for the rounds), then one
    token per forward."""
    ids = list(prompt)
    for step in range(result.n):
        rows, seconds = sequence.advance(ids)
        if step == 0:
            result.prefill_seconds = seconds
        else:
            result.step_seconds.append(seconds)
        ids.append(pick(rows[-1], ids))
        result.reference.append(ids[-1])
        result.phase = Message(
            "hood.jacobi.phase.greedy", "greedy token {i}/{n} (one forward each)", i=step + 1, n=result.n
        )
        yield result


def _rounds(
    sequence: ProbeSequence, pick: Picker, prompt: list[int], result: JacobiResult
) -> Iterator[JacobiResult]:
    """Jacobi rounds until the canvas is a fixed point: at most n (each settles one more position)."""
    canvas, n = list(result.guess), result.n
    for number in range(1, n + 1):
        # one forward: the prompt's last token and the canvas against the cached prompt (the cache is
        # cropped back to the prompt first); row i scores the token after prompt + canvas[:i]
        rows, seconds = sequence.advance(prompt + canvas, last=n + 1)
        out = [pick(rows[i], prompt + canvas[:i]) for i in range(n)]
        settled = min(n, common_prefix(canvas, out) + 1)
        changed = sum(a != b for a, b in zip(canvas, out, strict=True))
        final = common_prefix(out, result.reference)
        result.rounds.append(JacobiRound(out, final, settled, changed, seconds))
        result.phase = Message(
            "hood.jacobi.phase.round",
            "round {round}: {final}/{n} tokens final",
            round=number,
            final=final,
            n=n,
        )
        yield result
        if settled == n or any(t in result.eos for t in out[:settled]):
            break
        canvas = out


def _cut_at_eos(ids: list[int], eos: Sequence[int]) -> list[int]:
    for i, token in enumerate(ids):
        if token in eos:
            return ids[: i + 1]
    return list(ids)


LESSON = Lesson("jacobi", Message("hood.jacobi.title", "Why not all at once"), (), iter_run)
