"""Step-by-step generation: look at the next-token distribution, pick, undo, branch, force.

A `StepSession` is a prompt, a `GenerationTree` of every token ever appended, and the current
path through it (root = the prompt, tip = the last token). Its KV cache lives in the engine
under the session's key: a pick runs one forward over the new token only, an undo or a branch
switch is a crop, and an evicted cache is recomputed from the ids. Every number comes from the
model's own scores:

    session = StepSession(engine, "The capital of France is")
    session.candidates(5)            # top tokens, raw and after-sampling probabilities
    session.pick(session.candidates(1)[0].token_id)
    session.undo()
    session.ledger                   # chosen tokens, log-probs, entropy, perplexity so far
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from playground.engine.base import Engine
from playground.engine.prompts import Message, encode_continuation, encode_conversation, encode_prompt
from playground.engine.records import TokenRecord, describe_rows, raw_logprobs
from playground.engine.sampling import (
    SamplingSettings,
    Stage,
    choose_token,
    sampling_stages,
    seeded_generator,
    validate_settings,
)
from playground.engine.tokens import check_token_id, decode_ids, token_piece
from playground.errors import PlaygroundError
from playground.step.records import Branch, Candidate, LedgerEntry, TextProbability
from playground.tree import ROOT, GenerationTree, TreeNode

StepProgressFn = Callable[[int, int], None]  # (steps done, steps asked)
SettingsLike = SamplingSettings | Mapping[str, Any] | None


class StepSession:
    """A prompt, a tree of appended tokens, and the current path through it (see module doc).

    conversation: the chat turns the prompt came from (a session opened from the Chat tab),
    so that "continue as chat" can return to them; None for a one-message prompt."""

    def __init__(
        self,
        engine: Engine,
        prompt: str,
        chat: bool = False,
        *,
        settings: SettingsLike = None,
        conversation: Sequence[Message] | None = None,
        system_prompt: str | None = None,
    ) -> None:
        self.engine = engine
        self.prompt, self.chat = prompt, bool(chat)
        self.conversation = [dict(m) for m in conversation] if conversation is not None else None
        self.system_prompt = system_prompt
        if self.conversation is not None:
            self.chat = True
            self.prompt_ids = encode_conversation(engine.tokenizer, self.conversation, system_prompt)
        else:
            self.prompt_ids = encode_prompt(engine.tokenizer, prompt, self.chat)
        if len(self.prompt_ids) > engine.context_length:
            raise PlaygroundError(
                "The prompt has {tokens} tokens, more than the model's context limit of {context} tokens.",
                key="step.error.prompt_too_long",
                tokens=len(self.prompt_ids),
                context=engine.context_length,
            )
        self.settings = validate_settings(settings)
        self.tree = GenerationTree(self.prompt_ids)
        self.path: list[int] = [ROOT]  # read-only outside: _set_path and _push keep what follows in step
        self._path_ids: list[int] = []  # token id of each generated node on the path
        self._path_totals: list[float] = []  # running sum of their log-probs (the ledger's chain rule)
        self.key = f"step:{uuid.uuid4().hex}"  # this session's sequence in the engine
        self._lock = threading.RLock()

    @classmethod
    def from_path(
        cls,
        engine: Engine,
        prompt: str,
        chat: bool,
        records: Sequence[TokenRecord],
        *,
        settings: SettingsLike = None,
        conversation: Sequence[Message] | None = None,
        system_prompt: str | None = None,
        cache_from: str | None = None,
    ) -> StepSession:
        """A session already at the end of a path whose records are known (a beam node, a chat
        answer's token): the numbers move over, nothing is recomputed. cache_from: an engine
        sequence covering these ids (a chat answer's), copied instead of reading the prompt again."""
        session = cls(
            engine, prompt, chat, settings=settings, conversation=conversation, system_prompt=system_prompt
        )
        session._check_room(len(records))
        session._set_path([ROOT, *session.tree.extend(ROOT, records)])
        if cache_from is not None:
            engine.fork(cache_from, session.key)
        return session

    # --- reading ---------------------------------------------------------------------

    @property
    def nodes(self) -> list[TreeNode]:
        return self.tree.nodes

    @property
    def tip(self) -> int:
        """Node id at the end of the current path."""
        return self.path[-1]

    @property
    def token_ids(self) -> list[int]:
        """Generated token ids on the current path (without the prompt)."""
        return list(self._path_ids)

    @property
    def ids(self) -> list[int]:
        """Prompt ids followed by the generated ids."""
        return self.prompt_ids + self._path_ids

    @property
    def records(self) -> list[TokenRecord]:
        """The records of the tokens on the current path."""
        return [self.tree.nodes[n].token for n in self.path[1:]]  # type: ignore[misc]

    @property
    def text(self) -> str:
        """The generated continuation, decoded as one sequence."""
        return decode_ids(self.engine.tokenizer, self.token_ids)

    @contextmanager
    def locked(self) -> Iterator[StepSession]:
        """Hold this session's lock (re-entrant) so an action and the reads that follow it see
        one state: `with session.locked(): session.pick(t); render(session)`."""
        with self._lock:
            yield self

    @property
    def ledger(self) -> list[LedgerEntry]:
        """Per generated step: the token's record and the running totals (the chain rule)."""
        return self._ledger_tail(len(self.path) - 1)

    def _ledger_tail(self, count: int) -> list[LedgerEntry]:
        """The ledger's last `count` entries. Only those are built: an action returns its own
        steps, and at a 4,000-step path building every entry cost more than the forward's extra
        attention. The running totals are kept with the path."""
        with self._lock:
            first = len(self.path) - 1 - count
            return [
                LedgerEntry(step, node_id, record, total, _perplexity(total, step))  # type: ignore[arg-type]
                for step, node_id, record, total in zip(
                    range(first + 1, len(self.path)),
                    self.path[first + 1 :],
                    (self.tree.nodes[n].token for n in self.path[first + 1 :]),
                    self._path_totals[first:],
                    strict=True,
                )
            ]

    def next_logits(self) -> torch.Tensor:
        """Raw next-token scores (vocab,) at the tip (no forward when the engine remembers them)."""
        with self._lock:
            return self._scores()

    def stages(self, settings: SettingsLike = None) -> list[Stage]:
        """The tip's distribution after each sampling stage: [raw, stage1, ...]."""
        settings = self._settings(settings)
        with self._lock:
            return sampling_stages(self._scores(), self.ids, settings)

    def candidates(self, k: int = 10, settings: SettingsLike = None) -> list[Candidate]:
        """The k most likely next tokens (raw distribution), with after-sampling probabilities."""
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise PlaygroundError(
                "The number of candidates must be an integer >= 1, got {k!r}",
                key="step.error.candidates",
                k=k,
            )
        stages = self.stages(settings)
        logprobs = raw_logprobs(stages[0].logits, self.engine.capabilities.full_vocab)  # (vocab,)
        known = int(torch.isfinite(logprobs).sum())
        top = torch.topk(logprobs, min(k, known))
        ranks = (logprobs.unsqueeze(0) > top.values.unsqueeze(1)).sum(dim=1) + 1
        sampled = stages[-1].probs[top.indices]
        rows = zip(top.indices.tolist(), top.values.tolist(), ranks.tolist(), sampled.tolist(), strict=True)
        tokenizer = self.engine.tokenizer
        return [
            Candidate(rank, token_id, token_piece(tokenizer, token_id), math.exp(lp), lp, p)
            for token_id, lp, rank, p in rows
        ]

    def scores_after(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Raw next-token scores (vocab,) after the path and then token_ids, none of them appended:
        a look ahead (step/lookahead.py). One forward over token_ids; the path stays as it is."""
        with self._lock:
            for token_id in token_ids:
                check_token_id(token_id, self.engine.vocab_size)
            self._check_room(len(token_ids))
            return self.engine.sync(self.key, self.ids + list(token_ids))[-1]

    def probability_of(self, token_or_text: int | str, settings: SettingsLike = None) -> TextProbability:
        """How likely any token id or text is as the continuation, and its rank, however far
        outside the top-k. Text of several tokens gets every token's factor (chain rule)."""
        settings = self._settings(settings)
        with self._lock:
            token_ids = self._tokens_for(token_or_text)
            self._check_room(len(token_ids) - 1)
            rows = self._rows_for(token_ids)
            final = sampling_stages(rows[0], self.ids, settings)[-1]
            records = self._describe(rows, token_ids, "force")
            records[0].sampled_prob = float(final.probs[token_ids[0]])
            text = token_or_text if isinstance(token_or_text, str) else records[0].text
            return TextProbability(text, records)

    def _rows_for(self, token_ids: list[int]) -> list[torch.Tensor]:
        """The score rows that predict each of token_ids after the tip. A full-vocabulary engine
        needs no forward for a single token; an engine returning only a top-N is synced through
        the last queried token too, so it knows every queried token's log-prob however unlikely
        (one more row, dropped)."""
        if self.engine.capabilities.full_vocab:
            return self.engine.sync(self.key, self.ids + token_ids[:-1], last=len(token_ids))
        return self.engine.sync(self.key, self.ids + token_ids, last=len(token_ids) + 1)[:-1]

    def branches(self) -> list[Branch]:
        """Every leaf of the tree, oldest first; `current` when the tip lies on its path."""
        with self._lock:
            result = []
            for leaf in self.tree.leaves():
                if leaf == ROOT:
                    continue
                path = self.tree.path(leaf)
                text = decode_ids(self.engine.tokenizer, self.tree.token_ids(leaf))
                result.append(Branch(leaf, len(path) - 1, text, self.tip in path))
            return result

    # --- changing the path -------------------------------------------------------------

    def pick(self, token_id: int) -> LedgerEntry:
        """Append one token of your choice (one forward over that token only)."""
        with self._lock:
            token_id = check_token_id(token_id, self.engine.vocab_size)
            self._check_room(1)
            self._append([token_id], "pick")
            return self._ledger_tail(1)[-1]

    def force(self, text: str) -> list[LedgerEntry]:
        """Append any text (tokenized on its own, possibly several tokens, one forward)."""
        with self._lock:
            if not isinstance(text, str) or not text:
                raise PlaygroundError(
                    "The text to force is empty: type the text to append.", key="step.error.force_empty"
                )
            token_ids = encode_continuation(self.engine.tokenizer, text)
            if not token_ids:
                raise PlaygroundError(
                    "The text {text!r} gives no tokens.",
                    key="step.error.no_tokens",
                    text=text,
                )
            return self.append_tokens(token_ids)

    def append_tokens(self, token_ids: Sequence[int]) -> list[LedgerEntry]:
        """Append given token ids in one forward (e.g. a beam's continuation), as forced tokens."""
        with self._lock:
            checked = [check_token_id(t, self.engine.vocab_size) for t in token_ids]
            if not checked:
                return []
            self._check_room(len(checked))
            self._append(checked, "force")
            return self._ledger_tail(len(checked))

    def greedy(self, n: int = 1, progress: StepProgressFn | None = None) -> list[LedgerEntry]:
        """Append the most likely token n times (stops after an end-of-sequence token)."""
        return self.sample_steps(n, SamplingSettings(temperature=0), None, progress, source="greedy")

    def sample(self, settings: SettingsLike = None, seed: int | None = None) -> LedgerEntry:
        """Draw one token from the distribution after the sampling stages."""
        return self.sample_steps(1, settings, seed)[-1]

    def sample_steps(
        self,
        n: int,
        settings: SettingsLike = None,
        seed: int | None = None,
        progress: StepProgressFn | None = None,
        *,
        source: str = "sample",
    ) -> list[LedgerEntry]:
        """Draw n tokens in a row from one seeded RNG (the same seed gives the same tokens as
        `torch.manual_seed(seed)` + `generate(do_sample=True)`); stops after end of sequence."""
        settings = self._settings(settings)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise PlaygroundError(
                "The number of steps must be an integer >= 1, got {n!r}", key="step.error.steps", n=n
            )
        with self._lock:
            self._check_room(n)
            generator = seeded_generator(seed, self._scores().device)  # where the scores live
            start = len(self.path)
            for done in range(1, n + 1):
                token_id = self._sample_one(settings, generator, source)
                if progress is not None:
                    progress(done, n)
                if token_id in self.engine.eos_token_ids:
                    break
            return self._ledger_tail(len(self.path) - start)

    def _sample_one(self, settings: SamplingSettings, generator: torch.Generator, source: str) -> int:
        final = sampling_stages(self._scores(), self.ids, settings)[-1]
        token_id = choose_token(final.logits.unsqueeze(0), settings, generator)
        sampled = None if source == "greedy" else float(final.probs[token_id])
        self._append([token_id], source, sampled)
        return token_id

    def undo(self, n: int = 1) -> None:
        """Go back n tokens (they stay in the tree as a branch); the cache is cropped on the next step."""
        with self._lock:
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise PlaygroundError(
                    "Undo needs a number of steps >= 1, got {n!r}",
                    key="step.error.undo_steps",
                    n=n,
                )
            generated = len(self.path) - 1
            if generated == 1 < n:
                raise PlaygroundError(
                    "Nothing to undo: 1 generated token, and undo asked for {n}.",
                    key="step.error.undo_one",
                    n=n,
                )
            if generated < n:
                raise PlaygroundError(
                    "Nothing to undo: {generated} generated tokens, and undo asked for {n}.",
                    key="step.error.nothing_to_undo",
                    generated=generated,
                    n=n,
                )
            self.path, self._path_ids, self._path_totals = (
                self.path[:-n],
                self._path_ids[:-n],
                self._path_totals[:-n],
            )

    def switch_to(self, node_id: int) -> None:
        """Make node_id the tip (the cache follows on the next step: crop + forward the rest)."""
        with self._lock:
            self._set_path(self.tree.path(node_id))

    def release(self) -> None:
        """Free this session's cache in the engine."""
        self.engine.release(self.key)

    def use_settings(self, settings: SettingsLike) -> SamplingSettings:
        """Make `settings` the session's own (what export writes); returns them validated."""
        checked = validate_settings(settings)
        with self._lock:
            self.settings = checked
        return checked

    # --- internals -------------------------------------------------------------------------

    def _settings(self, settings: SettingsLike) -> SamplingSettings:
        return self.settings if settings is None else validate_settings(settings)

    def _scores(self) -> torch.Tensor:
        """Raw next-token scores (vocab,) after the current path."""
        return self.engine.sync(self.key, self.ids)[-1]

    def _check_room(self, extra: int) -> None:
        used, limit = len(self.ids), self.engine.context_length
        if used + extra > limit:
            raise PlaygroundError(
                "Context limit reached: the model reads at most {limit} tokens; this session has {used} and "
                "{extra} more would make {total}. Undo some tokens or start anew.",
                key="step.error.context",
                limit=limit,
                used=used,
                extra=extra,
                total=used + extra,
            )

    def _tokens_for(self, token_or_text: int | str) -> list[int]:
        if isinstance(token_or_text, str):
            if not token_or_text:
                raise PlaygroundError(
                    "Type a token or some text to look up its probability.", key="step.error.query_empty"
                )
            ids = encode_continuation(self.engine.tokenizer, token_or_text)
            if not ids:
                raise PlaygroundError(
                    "The text {text!r} gives no tokens.", key="step.error.no_tokens", text=token_or_text
                )
            return ids
        return [check_token_id(token_or_text, self.engine.vocab_size)]

    def _describe(
        self, rows: torch.Tensor, token_ids: list[int], source: str, seconds: float = 0.0
    ) -> list[TokenRecord]:
        per_token = [seconds / len(token_ids)] * len(token_ids)
        capabilities = self.engine.capabilities
        complete, limit = capabilities.full_vocab, None if capabilities.full_vocab else capabilities.top_n
        return describe_rows(
            self.engine.tokenizer,
            rows,
            token_ids,
            complete=complete,
            source=source,
            seconds=per_token,
            rank_limit=limit,
        )

    def _append(self, token_ids: list[int], source: str, sampled: float | None = None) -> None:
        """Extend the path by token_ids: one forward over them; on failure nothing changes."""
        old_path, old_count = list(self.path), len(self.tree.nodes)
        try:
            started = time.perf_counter()
            rows = self.engine.sync(self.key, self.ids + token_ids, last=len(token_ids) + 1)
            records = self._describe(rows[:-1], token_ids, source, time.perf_counter() - started)
            records[0].sampled_prob = sampled
            for record in records:
                node_id = self.tree.add(self.tip, record)
                # A token chosen again (after an undo) keeps its node, but the record says how it
                # was chosen this time (the "how" column, the after-sampling probability).
                self.tree.nodes[node_id].token = record
                self._push(node_id)
        except BaseException:
            self.tree.truncate(old_count)
            self._set_path(old_path)
            raise

    def _set_path(self, path: list[int]) -> None:
        """Make `path` (node ids from the root) the current path, with its ids and totals, in one
        assignment (a reader without the lock sees the old path or the new one, never half)."""
        records = [self.tree.nodes[n].token for n in path[1:]]
        ids = [record.id for record in records]  # type: ignore[union-attr]
        totals = list(itertools.accumulate(record.logprob for record in records))  # type: ignore[union-attr]
        self.path, self._path_ids, self._path_totals = list(path), ids, totals

    def _push(self, node_id: int) -> None:
        """Extend the current path by one node (its ids and running total follow)."""
        record = self.tree.nodes[node_id].token
        total = self._path_totals[-1] if self._path_totals else 0.0
        self.path.append(node_id)
        self._path_ids.append(record.id)  # type: ignore[union-attr]
        self._path_totals.append(total + record.logprob)  # type: ignore[union-attr]


def _perplexity(cum_logprob: float, steps: int) -> float:
    return math.exp(-cum_logprob / steps)
