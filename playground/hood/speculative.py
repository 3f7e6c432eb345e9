"""Speculative decoding: draft a few tokens cheaply, then verify them all in one forward.

    result = run(engine, prompt_ids, 64, method="prompt_lookup", draft_tokens=4)
    result.ids                      # the new tokens (greedy: exactly plain greedy decoding's)
    result.rounds[0].drafted        # the ids drafted in the first round
    result.rounds[0].accepted       # how many of them the model accepted

Draft sources:
- "prompt_lookup": the tokens that followed the latest earlier occurrence of the text's last
  n-gram (no model at all: copies from the context);
- "early_exit": the model's own first k layers, then its final norm and head (a twin that
  shares the weights, with its own KV cache);
- "draft": a second loaded model with the same tokenizer (`--draft-model`).

Verification: one forward of the model over the last token and the d drafts gives d + 1
next-token distributions p. Greedy: a draft is accepted while it is the model's own choice,
and the model's choice at the first mismatch (or after the last draft) is the bonus token, so
the output is plain greedy decoding's, token for token. Sampling: a draft x with draft
probability q(x) is accepted with probability min(1, p(x) / q(x)); at the first rejection the
token is drawn from the residual max(0, p − q) renormalised; after all d are accepted a bonus
is drawn from p. The output is then distributed exactly as sampling from p (Leviathan et al.
2023; Chen et al. 2023). A prompt-lookup draft is certain (q = 1 for its token).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.engine.base import Engine
from playground.engine.control import Control, run_to_end
from playground.engine.probes import Picker, greedy_picker
from playground.engine.protocols import ProbeSequence
from playground.engine.sampling import SamplingSettings, final_scores, seeded_generator, validate_settings
from playground.errors import PlaygroundError
from playground.hood.common import NEW_TOKENS, Lesson, Stopwatch, fits_context, require, whole_in_range
from playground.messages import Message

METHODS = ("prompt_lookup", "early_exit", "draft")
MAX_DRAFT = 16  # draft tokens per round
MAX_NGRAM = 8
MAX_NEW_TOKENS = 1024


@dataclass(frozen=True)
class Check:
    """The accept test of one drafted token."""

    token: int
    target_prob: float  # p(x): the model's probability of the drafted token
    draft_prob: float  # q(x): the draft's (1 for a prompt-lookup draft)
    accepted: bool
    threshold: float  # greedy: 1 when x is the model's own choice, else 0; sampling: min(1, p/q)
    draw: float | None = None  # sampling: the uniform number compared with the threshold


@dataclass
class Round:
    """One draft-then-verify round: one forward of the model."""

    drafted: list[int]
    accepted: int  # drafted tokens that passed the test (a prefix of drafted)
    checks: list[Check]
    bonus: int | None  # the model's own token after the accepted drafts (None: cut by EOS)
    emitted: list[int]  # what the round added: the accepted drafts, then the bonus
    draft_seconds: float
    verify_seconds: float
    finished_at: float = 0.0  # seconds since the speculative loop started


@dataclass
class SpeculativeResult:
    method: str
    draft_tokens: int  # the most drafted per round
    greedy: bool
    ids: list[int] = field(default_factory=list)  # new tokens
    rounds: list[Round] = field(default_factory=list)
    seconds: float = 0.0  # the speculative loop's time, waits for the shared model excluded
    plain_ids: list[int] | None = None  # plain decoding in the same run (compare=True)
    plain_seconds: float | None = None
    plain_times: list[float] = field(default_factory=list)  # plain decoding: seconds when each token was out
    exit_layer: int | None = None
    phase: str = ""

    @property
    def acceptance_rate(self) -> float:
        drafted = sum(len(r.drafted) for r in self.rounds)
        return sum(r.accepted for r in self.rounds) / drafted if drafted else 0.0

    @property
    def tokens_per_second(self) -> float:
        return len(self.ids) / self.seconds if self.seconds else 0.0

    @property
    def plain_tokens_per_second(self) -> float | None:
        if not self.plain_ids or not self.plain_seconds:
            return None
        return len(self.plain_ids) / self.plain_seconds

    @property
    def speedup(self) -> float | None:
        plain = self.plain_tokens_per_second
        return self.tokens_per_second / plain if plain else None

    @property
    def identical(self) -> bool | None:
        """Greedy: the same tokens as plain decoding (None when not compared or sampled)."""
        return None if self.plain_ids is None or not self.greedy else self.plain_ids == self.ids


# --- the accept test (pure: hand-made distributions in the tests) -------------------------------------


def accept_probability(p: torch.Tensor, q: torch.Tensor, token: int) -> float:
    """min(1, p(x) / q(x)) for the drafted token x."""
    qx = float(q[token])
    return 1.0 if qx <= 0 else min(1.0, float(p[token]) / qx)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, p − q) renormalised: what a rejected draft is replaced from."""
    rest = (p - q).clamp(min=0)
    total = rest.sum()
    return rest / total if total > 0 else p


def verify_sampled(
    p: torch.Tensor, q: torch.Tensor, drafted: Sequence[int], generator: torch.Generator
) -> tuple[int, int, list[Check]]:
    """The standard rule over d drafts: p (d + 1, vocab) the model's distributions, q (d, vocab) the
    draft's. Returns (accepted count, the token after them, the checks)."""
    checks = []
    for i, token in enumerate(drafted):
        threshold = accept_probability(p[i], q[i], token)
        draw = float(torch.rand(1, generator=generator))
        accepted = draw < threshold
        checks.append(Check(token, float(p[i, token]), float(q[i, token]), accepted, threshold, draw))
        if not accepted:
            return i, _draw(residual(p[i], q[i]), generator), checks
    return len(drafted), _draw(p[len(drafted)], generator), checks


def verify_greedy(
    rows: torch.Tensor, q: torch.Tensor | None, drafted: Sequence[int], ids: list[int], pick: Picker
) -> tuple[int, int, list[Check]]:
    """Greedy: accept while each draft is the model's own choice. rows (d + 1, vocab) raw logits;
    q (d, vocab) the draft's probabilities (None: a certain draft). Probabilities shown are raw."""
    p = torch.softmax(rows, dim=-1)
    checks = []
    for i, token in enumerate(drafted):
        choice = pick(rows[i], ids + list(drafted[:i]))
        qx = 1.0 if q is None else float(q[i, token])
        checks.append(Check(token, float(p[i, token]), qx, token == choice, float(token == choice)))
        if token != choice:
            return i, choice, checks
    return len(drafted), pick(rows[len(drafted)], ids + list(drafted)), checks


def _draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


# --- drafts ----------------------------------------------------------------------------------------


def lookup_draft(ids: Sequence[int], n: int, max_ngram: int = 3) -> list[int]:
    """Prompt lookup: for the longest n-gram (max_ngram down to 1) ending the text that occurred
    earlier, the up to n tokens that followed its latest earlier occurrence; [] when none did."""
    ids = list(ids)
    for size in range(min(max_ngram, len(ids) - 1), 0, -1):
        tail = ids[-size:]
        for start in range(len(ids) - size - 1, -1, -1):
            if ids[start : start + size] == tail:
                return ids[start + size : start + size + n]
    return []


class ModelDrafter:
    """Drafts from a model (an early-exit twin or a draft engine), one token per forward, with its
    own KV cache kept in step with the text."""

    def __init__(self, sequence: ProbeSequence, vocab: int, sampled: SamplingSettings | None) -> None:
        self.sequence, self.vocab, self.settings = sequence, vocab, sampled

    def draft(self, ids: list[int], n: int, generator: torch.Generator) -> tuple[list[int], torch.Tensor]:
        """n tokens after ids and the draft's probabilities (n, vocab) they were drawn from."""
        tokens: list[int] = []
        probs = []
        for _ in range(n):
            rows, _ = self.sequence.advance(ids + tokens)
            row = _fit(rows[-1], self.vocab)
            if self.settings is None:
                q = torch.softmax(row, dim=-1)
                tokens.append(int(row.argmax()))
            else:
                q = torch.softmax(final_scores(row, torch.tensor(ids + tokens), self.settings)[0], dim=-1)
                tokens.append(_draw(q, generator))
            probs.append(q)
        return tokens, torch.stack(probs)


def _fit(row: torch.Tensor, vocab: int) -> torch.Tensor:
    """A draft row on the CPU sized to the model's vocabulary (a padded head differs in size)."""
    row = row.float().cpu()
    if row.shape[-1] >= vocab:
        return row[:vocab]
    return torch.cat([row, row.new_full((vocab - row.shape[-1],), -float("inf"))])


def same_tokenizer(a: Any, b: Any) -> bool:
    """True when two tokenizers map every piece to the same id (and have the same specials)."""
    if a is b:
        return True
    return a.get_vocab() == b.get_vocab() and a.all_special_ids == b.all_special_ids


# --- decoding -------------------------------------------------------------------------------------


def run(
    lm: Engine,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    method: str = "prompt_lookup",
    *,
    draft_tokens: int = 4,
    exit_layer: int | None = None,
    draft: Engine | None = None,
    settings: SamplingSettings | dict | None = None,
    seed: int = 0,
    ngram: int = 3,
    compare: bool = False,
    control: Control | None = None,
) -> SpeculativeResult:
    """Decode up to max_new_tokens after prompt_ids by drafting and verifying (module docstring).

    method: "prompt_lookup", "early_exit" (exit_layer = k, default half the layers) or "draft"
    (draft = a second engine with the same tokenizer). settings: None or temperature 0 = greedy;
    else sampled with those settings (a private RNG seeded with seed). compare: also run plain
    decoding in the same run (plain_ids, plain_seconds, speedup)."""
    return run_to_end(
        iter_run(
            lm,
            prompt_ids,
            max_new_tokens,
            method,
            draft_tokens=draft_tokens,
            exit_layer=exit_layer,
            draft=draft,
            settings=settings,
            seed=seed,
            ngram=ngram,
            compare=compare,
            control=control,
        )
    )


@dataclass
class _Run:
    """One speculative decode's fixed parts."""

    lm: Engine
    prompt: list[int]
    max_new: int
    method: str
    k: int
    ngram: int
    settings: SamplingSettings | None  # None: greedy
    seed: int
    drafter: ModelDrafter | None
    control: Control
    exit_layer: int | None = None  # early exit: the draft's depth k


def iter_run(
    lm: Engine,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    method: str = "prompt_lookup",
    **options: Any,
) -> Iterator[SpeculativeResult]:
    """run, yielding the result after each round (and during plain decoding)."""
    run, compare = _setup(lm, list(prompt_ids), max_new_tokens, method, **options)
    result = SpeculativeResult(method, run.k, run.settings is None, exit_layer=run.exit_layer)
    if compare:
        yield from _plain(run, result)
    yield from _speculate(run, result)
    return result


def _setup(
    lm: Engine,
    prompt: list[int],
    max_new: int,
    method: str,
    *,
    draft_tokens: int = 4,
    exit_layer: int | None = None,
    draft: Engine | None = None,
    settings: SamplingSettings | dict | None = None,
    seed: int = 0,
    ngram: int = 3,
    compare: bool = False,
    control: Control | None = None,
) -> tuple[_Run, bool]:
    """Check every argument (each error says what is allowed) and build the drafter."""
    probes = require(lm, "hidden_states" if method == "early_exit" else "probes")
    if method not in METHODS:
        raise PlaygroundError(
            "Unknown draft method {method!r}: use one of {methods}.",
            key="hood.speculative.error.method",
            method=method,
            methods=", ".join(METHODS),
        )
    whole_in_range(draft_tokens, 1, MAX_DRAFT, Message("hood.name.draft_length", "Draft length"))
    whole_in_range(max_new, 1, MAX_NEW_TOKENS, NEW_TOKENS)
    whole_in_range(ngram, 1, MAX_NGRAM, Message("hood.name.ngram", "Lookup n-gram size"))
    probes.check(prompt)
    fits_context(lm, len(prompt), max_new)
    checked = validate_settings(settings)
    sampled = None if settings is None or checked.greedy else checked
    control = control or Control()
    drafter, depth = None, None
    if method == "early_exit":
        depth = probes.num_layers // 2 if exit_layer is None else exit_layer
        drafter = ModelDrafter(probes.sequence(exit_layer=depth, control=control), lm.vocab_size, sampled)
    elif method == "draft":
        drafter = ModelDrafter(_draft_sequence(lm, draft, control), lm.vocab_size, sampled)
    run = _Run(lm, prompt, max_new, method, draft_tokens, ngram, sampled, int(seed), drafter, control, depth)
    return run, compare


def check_draft(lm: Engine, draft: Engine | None) -> None:
    """Refuse a draft model that is missing or tokenizes differently from the model."""
    if draft is None:
        raise PlaygroundError(
            "No draft model is loaded: start the app with --draft-model NAME (a small model with the same "
            "tokenizer), or pick prompt lookup or early exit.",
            key="hood.speculative.error.no_draft",
        )
    if not same_tokenizer(lm.tokenizer, draft.tokenizer):
        raise PlaygroundError(
            "The draft model {draft} has a different tokenizer ({draft_tokens:,} tokens) from "
            "{model} ({model_tokens:,} tokens): drafts are token ids, so both models must share one "
            "tokenizer.",
            key="hood.speculative.error.tokenizer",
            draft=draft.name,
            draft_tokens=len(draft.tokenizer),
            model=lm.name,
            model_tokens=len(lm.tokenizer),
        )


def _draft_sequence(lm: Engine, draft: Engine | None, control: Control) -> ProbeSequence:
    check_draft(lm, draft)
    return require(draft).sequence(control=control)


def _plain(run: _Run, result: SpeculativeResult) -> Iterator[SpeculativeResult]:
    """The baseline in the same run: one token per forward with the same machinery."""
    probes = require(run.lm)
    sequence, pick = probes.sequence(control=run.control), greedy_picker(run.lm, run.prompt)
    generator = seeded_generator(run.seed, torch.device("cpu"))
    ids, result.plain_ids, result.plain_times = run.prompt, [], []
    watch = Stopwatch(run.control)
    while len(result.plain_ids) < run.max_new:
        rows, _ = sequence.advance(ids)
        result.plain_ids.append(_choose(run, rows[-1], ids, pick, generator))
        ids = run.prompt + result.plain_ids
        result.plain_times.append(watch.seconds)
        result.plain_seconds = result.plain_times[-1]
        result.phase = Message(
            "hood.speculative.phase.plain",
            "plain decoding (one token per forward): {done}/{n}",
            done=len(result.plain_ids),
            n=run.max_new,
        )
        with watch.paused():
            yield result
        if result.plain_ids[-1] in run.lm.eos_token_ids:
            break


def _choose(run: _Run, row: torch.Tensor, ids: list[int], pick: Picker, generator: torch.Generator) -> int:
    if run.settings is None:
        return pick(row, ids)
    return _draw(_probabilities(run, row[None], ids)[0], generator)


def _probabilities(run: _Run, rows: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """The model's rows (n, vocab) after the sampling settings, as probabilities on the CPU; row i
    follows ids + i more tokens (the repetition penalty sees the ids before it)."""
    rows = rows.float().cpu()
    history = torch.tensor(ids)
    return torch.stack([torch.softmax(final_scores(r, history, run.settings)[0], dim=-1) for r in rows])


def _speculate(run: _Run, result: SpeculativeResult) -> Iterator[SpeculativeResult]:
    probes = require(run.lm)
    target, pick = probes.sequence(control=run.control), greedy_picker(run.lm, run.prompt)
    generator = seeded_generator(run.seed, torch.device("cpu"))
    watch = Stopwatch(run.control)
    while len(result.ids) < run.max_new:
        round_ = _round(run, target, run.prompt + result.ids, pick, generator)
        result.rounds.append(round_)
        result.ids.extend(round_.emitted)
        result.seconds = round_.finished_at = watch.seconds
        result.phase = Message(
            "hood.speculative.phase.round",
            "round {round}: {done}/{n} tokens",
            round=len(result.rounds),
            done=len(result.ids),
            n=run.max_new,
        )
        with watch.paused():
            yield result
        if result.ids[-1] in run.lm.eos_token_ids:
            break


def _round(
    run: _Run, target: ProbeSequence, ids: list[int], pick: Picker, generator: torch.Generator
) -> Round:
    """Draft up to k tokens, verify them in one forward, keep what passes plus the bonus."""
    n = min(run.k, run.max_new - len(ids) + len(run.prompt) - 1)
    started = time.perf_counter()
    q: torch.Tensor | None = None
    if n <= 0:
        drafted: list[int] = []
    elif run.drafter is None:
        drafted = lookup_draft(ids, n, run.ngram)
    else:
        drafted, q = run.drafter.draft(ids, n, generator)
    draft_seconds = time.perf_counter() - started
    rows, verify_seconds = target.advance(ids + drafted, last=len(drafted) + 1)
    if run.settings is None:
        accepted, bonus, checks = verify_greedy(rows, q, drafted, ids, pick)
    else:
        p = _probabilities(run, rows, ids)
        q = (
            q
            if q is not None
            else torch.nn.functional.one_hot(torch.tensor(drafted, dtype=torch.long), p.shape[-1]).float()
        )
        accepted, bonus, checks = verify_sampled(p, q, drafted, generator)
    emitted = _cut_at_eos([*drafted[:accepted], bonus], run.lm.eos_token_ids)
    kept_bonus = bonus if len(emitted) == accepted + 1 else None
    return Round(drafted, accepted, checks, kept_bonus, emitted, draft_seconds, verify_seconds)


def _cut_at_eos(tokens: list[int], eos: Sequence[int]) -> list[int]:
    for i, token in enumerate(tokens):
        if token in eos:
            return tokens[: i + 1]
    return tokens


LESSON = Lesson("speculative", Message("hood.speculative.title", "Speculative decoding"), (), iter_run)
