"""Training reads in parallel, generation writes in series: teacher forcing and error accumulation.

    tf = run(engine, ids, start)   # ONE forward scores every token of ids[start:]
    sum(tf.logprobs)                           # what training's loss sums (negated)
    tf.parallel_seconds, tf.serial_seconds     # that forward vs one forward per token
    tf.free_ids, tf.leaves_at                  # the model's own tokens, and where they leave ids

    ea = error_accumulation(engine, prompt_ids, at=1, token_id=None, new_tokens=24, rank=3)
    ea.original_ids, ea.perturbed_ids          # greedy as the model would, and with one token forced
    ea.kl                                      # per-step KL between the two runs from `at` on

In training every position sees the true text before it (teacher forcing), so one forward
scores them all. In generation each token is read back as the next input: one forward per
token, and a wrong token is never taken back (exposure bias).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from playground.engine.base import Engine
from playground.engine.control import Control, run_to_end
from playground.engine.probes import greedy_picker
from playground.engine.protocols import ProbeSequence
from playground.engine.tokens import check_token_id
from playground.errors import PlaygroundError
from playground.hood.common import NEW_TOKENS, Lesson, fits_context, require, whole_in_range
from playground.messages import Message

__all__ = [
    "LESSON",
    "ErrorAccumulation",
    "TeacherForcing",
    "check_continuation",
    "error_accumulation",
    "forced_scores",
    "iter_error_accumulation",
    "iter_run",
    "run",
]

MAX_TOKENS = 256  # prompt + reference: one forward on CPU (its prefill chunk), and n serial forwards
MAX_NEW_TOKENS = 64  # the two greedy continuations of error_accumulation
TOP = 10  # candidates listed (and forceable by rank) at the changed position


@dataclass
class TeacherForcing:
    """A reference text scored in one forward (teacher forced), and the model's own free-running
    tokens from the same prompt, one forward each (which is also the serial timing)."""

    ids: list[int]  # the whole reference sequence, prompt first
    start: int  # the first scored position: ids[start:] is the reference continuation
    logprobs: list[float] = field(default_factory=list)  # log p(ids[t] | ids[:t]) for t = start..
    ranks: list[int] = field(default_factory=list)  # each reference token's rank (1 = the top choice)
    argmax_ids: list[int] = field(default_factory=list)  # the model's own pick there, given the reference
    free_ids: list[int] = field(default_factory=list)  # greedy from ids[:start], one token per forward
    parallel_seconds: float = 0.0  # the one forward over the whole reference
    serial_step_seconds: list[float] = field(default_factory=list)  # each forward of the free run
    phase: str = ""  # what was just done (progress text: a Message)

    @property
    def reference_ids(self) -> list[int]:
        return self.ids[self.start :]

    @property
    def losses(self) -> list[float]:
        """Per-token loss (nats): -log p of each reference token, as a training step sums them."""
        return [-lp for lp in self.logprobs]

    @property
    def mean_loss(self) -> float:
        return sum(self.losses) / len(self.losses) if self.logprobs else float("nan")

    @property
    def serial_seconds(self) -> float:
        """Generating as many tokens as the reference has: one forward each (the first reads the
        prompt, as generation must; each later one reads one token against the cache)."""
        return sum(self.serial_step_seconds)

    @property
    def leaves_at(self) -> int | None:
        """The first reference position (0-based) where free running picks another token than the
        reference's; None while it has followed the reference all the way."""
        reference = self.reference_ids
        return next((i for i, t in enumerate(self.free_ids) if t != reference[i]), None)


def run(lm: Engine, ids: Sequence[int], start: int, control: Control | None = None) -> TeacherForcing:
    """Score ids[start:] in ONE forward over ids (each position sees the true text before it), then
    generate as many tokens from ids[:start] one forward each, timing both. See TeacherForcing."""
    return run_to_end(iter_run(lm, ids, start, control))


def iter_run(
    lm: Engine, ids: Sequence[int], start: int, control: Control | None = None
) -> Iterator[TeacherForcing]:
    """teacher_forcing, yielding after the parallel forward and after every serial one."""
    probes = require(lm)
    ids = _checked_reference(lm, ids, start)
    result = TeacherForcing(ids, start)
    n = len(ids) - start
    pick = greedy_picker(lm, ids[:start])
    rows, result.parallel_seconds = probes.sequence(control=control).advance(ids[:-1], last=n)  # (n, vocab)
    result.logprobs, result.ranks = forced_scores(rows, result.reference_ids)
    result.argmax_ids = [pick(rows[i], ids[: start + i]) for i in range(n)]
    result.phase = Message("hood.teacher_forcing.phase.scored", "1 forward scored {n} reference tokens", n=n)
    yield result
    sequence = probes.sequence(control=control)
    for i in range(n):
        rows, seconds = sequence.advance(ids[:start] + result.free_ids)
        result.serial_step_seconds.append(seconds)
        result.free_ids.append(pick(rows[-1], ids[:start] + result.free_ids))
        result.phase = Message(
            "hood.teacher_forcing.phase.free", "free running: token {i}/{n}, one forward each", i=i + 1, n=n
        )
        yield result
    return result


def forced_scores(rows: torch.Tensor, targets: Sequence[int]) -> tuple[list[float], list[int]]:
    """Each target's log-probability and rank (1 = the top choice) under its row of raw scores
    (n, vocab): row i is the model's prediction before targets[i] (playground.scoring reads texts
    with it too)."""
    logprobs = torch.log_softmax(rows.float(), dim=-1)
    chosen = logprobs.gather(1, torch.tensor(list(targets), device=logprobs.device)[:, None])[:, 0]  # (n,)
    return chosen.tolist(), ((logprobs > chosen[:, None]).sum(dim=-1) + 1).tolist()


def _checked_reference(lm: Engine, ids: Sequence[int], start: int) -> list[int]:
    ids = list(ids)
    if not ids:
        raise PlaygroundError(
            "The text is empty: type a prompt and a reference continuation.",
            key="hood.teacher_forcing.error.empty",
        )
    if len(ids) > MAX_TOKENS:
        raise PlaygroundError(
            "This lesson reads at most {most} tokens (prompt and reference together) and this "
            "text has {tokens}: shorten it.",
            key="hood.teacher_forcing.error.too_long",
            most=MAX_TOKENS,
            tokens=len(ids),
        )
    if isinstance(start, bool) or not isinstance(start, int) or not 1 <= start < len(ids):
        raise PlaygroundError(
            "The reference starts at token {start!r} of {tokens}: it needs a prompt of at least 1 token "
            "and at least 1 token after it to score.",
            key="hood.teacher_forcing.error.start",
            start=start,
            tokens=len(ids),
        )
    for token_id in ids:
        check_token_id(token_id, lm.vocab_size)
    return ids


@dataclass
class ErrorAccumulation:
    """Two greedy continuations of one prompt: the model's own, and one with a token forced at
    answer position `at` (the same tokens before it, greedy again after it)."""

    prompt_ids: list[int]
    at: int  # the answer position (0-based) whose token is replaced
    new_tokens: int  # asked for in each run (a run stops early after an end-of-text token)
    token_id: int = -1  # the forced token (known once the run reaches `at`)
    original_ids: list[int] = field(default_factory=list)
    perturbed_ids: list[int] = field(default_factory=list)
    # kl[i]: KL(original || perturbed) in nats between the two runs' next-token distributions at
    # answer position at + i. kl[0] is 0: both read the same tokens up to there (the forced token
    # replaces the model's pick from that very distribution); after it they read different texts.
    kl: list[float] = field(default_factory=list)
    candidates: list[tuple[int, float]] = field(default_factory=list)  # the top (id, p) at `at`
    forced_prob: float = 0.0  # the model's probability of the forced token at `at`
    forced_rank: int = 0  # its rank there (1 = the model's own choice)
    phase: str = ""

    @property
    def first_difference(self) -> int | None:
        """The first answer position where the two runs' tokens differ (None: identical)."""
        a, b = self.original_ids, self.perturbed_ids
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)

    @property
    def differing(self) -> int:
        """How many answer positions from `at` on hold different tokens (a shorter run counts its
        missing positions as different)."""
        a, b = self.original_ids[self.at :], self.perturbed_ids[self.at :]
        return sum(x != y for x, y in zip(a, b, strict=False)) + abs(len(a) - len(b))


def error_accumulation(
    lm: Engine,
    prompt_ids: Sequence[int],
    at: int,
    token_id: int | None,
    new_tokens: int,
    *,
    rank: int | None = None,
    control: Control | None = None,
) -> ErrorAccumulation:
    """Continue prompt_ids greedily twice: as the model would, and with token_id forced at answer
    position `at` (or, token_id None, the model's rank-`rank` token there). See ErrorAccumulation."""
    return run_to_end(
        iter_error_accumulation(lm, prompt_ids, at, token_id, new_tokens, rank=rank, control=control)
    )


def iter_error_accumulation(
    lm: Engine,
    prompt_ids: Sequence[int],
    at: int,
    token_id: int | None,
    new_tokens: int,
    *,
    rank: int | None = None,
    control: Control | None = None,
) -> Iterator[ErrorAccumulation]:
    """error_accumulation, both runs in lockstep, yielding after every answer position."""
    probes = require(lm)
    prompt = check_continuation(lm, prompt_ids, at, token_id, new_tokens, rank)
    result = ErrorAccumulation(prompt, at, new_tokens)
    original = _Run(probes.sequence(control=control), prompt, lm)
    perturbed: _Run | None = None
    for position in range(new_tokens):
        row = original.step() if not original.done(new_tokens) else None
        if original.done(new_tokens) and len(original.ids) <= at:
            raise PlaygroundError(
                "Position {at} is past the continuation: the model ends it (end-of-text) after "
                "{tokens} tokens. Pick a position from 0 to {last}.",
                key="hood.teacher_forcing.error.ended",
                at=at,
                tokens=len(original.ids),
                last=len(original.ids) - 1,
            )
        if position == at and row is not None:
            forced = _force(lm, result, row, token_id, rank)
            perturbed = _Run(probes.sequence(control=control), prompt, lm, [*original.ids[:at], forced])
            result.kl.append(0.0)
        elif perturbed is not None and not perturbed.done(new_tokens):
            other = perturbed.step()
            if row is not None:
                result.kl.append(kl_divergence(row, other))
        result.original_ids = list(original.ids)
        result.perturbed_ids = list(perturbed.ids) if perturbed else list(original.ids)
        result.phase = Message(
            "hood.teacher_forcing.phase.position", "answer position {i}/{n}", i=position + 1, n=new_tokens
        )
        yield result
        if original.done(new_tokens) and (perturbed is None or perturbed.done(new_tokens)):
            break
    return result


class _Run:
    """One greedy continuation on its own cached sequence (generate's picks, one token per forward)."""

    def __init__(
        self, sequence: ProbeSequence, prompt: list[int], lm: Engine, ids: Sequence[int] = ()
    ) -> None:
        self.sequence, self.prompt, self.eos = sequence, prompt, set(lm.eos_token_ids)
        self.ids = list(ids)
        self.pick = greedy_picker(lm, prompt + self.ids)  # generate's processors, started from here

    def done(self, new_tokens: int) -> bool:
        return len(self.ids) >= new_tokens or bool(self.ids and self.ids[-1] in self.eos)

    def step(self) -> torch.Tensor:
        """One forward; appends the greedy token; returns the logits (vocab,) it was picked from."""
        rows, _ = self.sequence.advance(self.prompt + self.ids)
        self.ids.append(self.pick(rows[-1], self.prompt + self.ids))
        return rows[-1]


def _force(
    lm: Engine, result: ErrorAccumulation, row: torch.Tensor, token_id: int | None, rank: int | None
) -> int:
    """The forced token (given, or the model's rank-`rank` one), with its rank and the candidates."""
    probs = torch.softmax(row.float(), dim=-1)
    top = torch.topk(probs, min(TOP, probs.shape[-1]))
    result.candidates = [(int(i), float(p)) for i, p in zip(top.indices, top.values, strict=True)]
    forced = result.candidates[rank - 1][0] if token_id is None and rank is not None else int(token_id)
    result.token_id, result.forced_prob = forced, float(probs[forced])
    result.forced_rank = int((probs > probs[forced]).sum()) + 1
    return forced


def kl_divergence(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    """KL(p || q) in nats between the softmax distributions of two logit rows (vocab,)."""
    log_p = torch.log_softmax(p_logits.float(), dim=-1)
    log_q = torch.log_softmax(q_logits.float(), dim=-1)
    return float((log_p.exp() * (log_p - log_q)).sum().clamp(min=0.0))


def check_continuation(
    lm: Engine, prompt_ids: Sequence[int], at: int, token_id: int | None, new_tokens: int, rank: int | None
) -> list[int]:
    """The prompt's ids after checking every argument of error_accumulation (clear messages)."""
    prompt = list(prompt_ids)
    if not prompt:
        raise PlaygroundError(
            "The prompt is empty: type some text to continue.", key="hood.error.empty_prompt"
        )
    for t in prompt:
        check_token_id(t, lm.vocab_size)
    whole_in_range(new_tokens, 1, MAX_NEW_TOKENS, NEW_TOKENS)
    fits_context(lm, len(prompt), new_tokens)
    if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at < new_tokens:
        raise PlaygroundError(
            "Position {at!r} is past the continuation: it has {tokens} tokens (positions 0 to {last}).",
            key="hood.teacher_forcing.error.position",
            at=at,
            tokens=new_tokens,
            last=new_tokens - 1,
        )
    if (token_id is None) == (rank is None):
        raise PlaygroundError(
            "Give the token to force: a token id, or the rank of one of the model's choices.",
            key="hood.teacher_forcing.error.no_token",
        )
    if token_id is not None:
        check_token_id(token_id, lm.vocab_size)
    else:
        whole_in_range(rank, 1, TOP, Message("hood.name.forced_rank", "The forced token's rank"))
    return prompt


LESSON = Lesson(
    "teacher_forcing",
    Message("hood.teacher_forcing.title", "Training reads in parallel, generation writes in series"),
    (),
    iter_run,
)
