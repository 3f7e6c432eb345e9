"""`RemoteEngine`: the engine interface over a serving engine's HTTP API (one adapter per engine).

The server keeps the KV cache (its prefix cache makes a request whose ids share a prefix with an
earlier one cheap); this side keeps, per sequence key, the ids and the distributions already
fetched, so an undo, a branch switch or a fork costs no request, and a pick costs one.

Scores rows follow the engine convention (base.py): the log-probs of the engine's top-N at their
ids and -inf elsewhere, plus the given token's own log-prob where a row precedes a given token;
`capabilities.full_vocab` when N covers the whole vocabulary. Sampling stages then run here, on
those rows; chat decoding runs on the server (its native streaming), with the raw top-N reported
for every token.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any

import torch

from playground.engine.base import Capabilities, DecodePlan, Progress
from playground.engine.control import Control, check, report
from playground.engine.prompts import eos_token_ids, has_chat_template, pad_fill_id
from playground.engine.records import TokenRecord, describe_rows
from playground.engine.remote.adapter import (
    Adapter,
    ServerInfo,
    ServerKV,
    ServerTimings,
    StreamProgress,
    StreamToken,
)
from playground.engine.remote.distributions import Distributions, cut
from playground.engine.remote.notes import capability_notes, capability_reasons
from playground.engine.remote.sequences import RemoteBeams, RemoteSequence, Row, describe_streamed
from playground.engine.sampling import SamplingSettings, choose, final_scores, seeded_generator
from playground.engine.tokens import check_ids
from playground.errors import PlaygroundError
from playground.kv.geometry import model_dims


class RemoteEngine:
    """A model served by llama.cpp, vLLM or SGLang (see playground.engine.remote.connect)."""

    def __init__(
        self,
        adapter: Adapter,
        tokenizer: Any,
        info: ServerInfo,
        *,
        url: str,
        top_n: int,
        config: Any = None,
        generation_config: Any = None,
        connect_seconds: float = 0.0,
        tokenizer_source: str = "",
        raw_when_sampling: bool = True,
    ) -> None:
        self.adapter, self.tokenizer, self.info = adapter, tokenizer, info
        self.kind = adapter.kind
        self.url, self.config, self.generation_config = url, config, generation_config
        self.name = info.model
        self.top_n = int(top_n)
        self.tokenizer_source = tokenizer_source
        self.raw_when_sampling = raw_when_sampling
        self.load_seconds, self.source = connect_seconds, url
        self.dtype, self.num_parameters = None, None  # the server's own weights: not known here
        self.dims = model_dims(config) if config is not None else None
        self.probes = None  # the lessons need the model in this process
        self.last_timings: ServerTimings | None = None  # the server's timings of the latest stream
        self._eos = eos_token_ids(generation_config, config, tokenizer)
        # the distributions fetched so far, per sequence key (remote/distributions.py)
        self.known = Distributions(adapter, self.top_n, self.vocab_size, self._check_ids)
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, info.parallel), thread_name_prefix=f"{self.kind}-beams"
        )

    # --- what the model is --------------------------------------------------------------

    @property
    def context_length(self) -> int:
        if self.info.context_length:
            return int(self.info.context_length)
        text = self.config.get_text_config() if self.config is not None else None
        limit = getattr(text, "max_position_embeddings", None)
        return int(limit or min(getattr(self.tokenizer, "model_max_length", 2048), 2**20))

    @property
    def vocab_size(self) -> int:
        sizes = [len(self.tokenizer), self.info.vocab_size or 0]
        text = self.config.get_text_config() if self.config is not None else None
        sizes.append(int(getattr(text, "vocab_size", 0) or 0))
        return max(sizes)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos

    @property
    def pad_token_id(self) -> int:
        return pad_fill_id(self.generation_config, self._eos)

    @property
    def has_chat_template(self) -> bool:
        return has_chat_template(self.tokenizer)

    @property
    def full_vocab(self) -> bool:
        return self.top_n >= self.vocab_size

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            full_vocab=self.full_vocab,
            top_n=min(self.top_n, self.vocab_size),
            attentions=False,
            hidden_states=False,
            cache_bytes=False,
            score=self.adapter.has_score,
            batched=False,
            reasons=capability_reasons(self),
            notes=capability_notes(self),
        )

    def describe(self) -> str:
        tested = "" if self.adapter.tested_live else " · not yet tested against a live server"
        return f"{self.name} · served by {self.kind} at {self.url} · top {self.top_n:,} per position{tested}"

    @property
    def tested_live(self) -> bool:
        return self.adapter.tested_live

    concurrency = schedule = None  # the server schedules its own batch
    quantization: str | None = None  # the server's own format, not known here
    quantization_line = ""

    def describe_decode(self) -> str | None:
        return None  # the server decodes its own way

    def device_summary(self) -> str:
        return f"{self.kind} server"

    def measure_cache(self, seq_len: int, batch_size: int = 1, seed: int = 0) -> tuple[list[int], str]:
        raise PlaygroundError(self.capabilities.why_not("cache_bytes"))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.adapter.http.close()

    # --- sequences --------------------------------------------------------------------------

    def prefill(
        self, ids: Sequence[int], *, key: str | None = None, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        if key is None:
            return self.known.rows_for(RemoteSequence(), list(ids), last, control)
        self.release(key)
        return self.sync(key, ids, last=last, control=control)

    def extend(
        self, key: str, new_ids: Sequence[int], *, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        seq = self.known.peek(key)
        if seq is None:
            raise PlaygroundError(
                "No sequence {sequence!r} in the engine (never started, or forgotten): use sync.",
                key="remote.error.no_sequence",
                sequence=key,
            )
        return self.sync(key, seq.ids + list(new_ids), last=last, control=control)

    def sync(
        self, key: str, ids: Sequence[int], *, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        seq = self.known.take(key)
        try:
            return self.known.rows_for(seq, list(ids), last, control)
        finally:
            self.known.put(key, seq)

    def crop(self, key: str, length: int) -> None:
        seq = self.known.take(key)
        cut(seq, min(int(length), len(seq.ids)))
        self.known.put(key, seq)

    def fork(self, key: str, new_key: str) -> None:
        seq = self.known.peek(key) or RemoteSequence()
        self.known.put(new_key, RemoteSequence(list(seq.ids), dict(seq.rows), OrderedDict(seq.parked)))

    def release(self, key: str) -> None:
        self.known.drop(key)

    def sequence_ids(self, key: str) -> list[int]:
        seq = self.known.peek(key)
        return list(seq.ids) if seq is not None else []

    def _check_ids(self, ids: Sequence[int], last: int) -> None:
        check_ids(ids, last, self.context_length, self.vocab_size)

    # --- scoring ----------------------------------------------------------------------------

    def score(self, ids: Sequence[int], start: int, control: Control | None = None) -> torch.Tensor:
        """Rows (len(ids) - start, vocab) before each of ids[start:] (see _fetch for how)."""
        ids = list(ids)
        if not 1 <= start < len(ids):
            raise PlaygroundError(
                "Scoring starts at token {start} of {length}: it needs 1 <= start < length.",
                key="engine.error.score_start",
                start=start,
                length=len(ids),
            )
        seq = RemoteSequence()
        self.known.rows_for(seq, ids, len(ids) - start + 1, control)
        return torch.stack([self.known.row_tensor(seq.rows[m], ids[m]) for m in range(start, len(ids))])

    def generation_processors(
        self, prompt_ids: Sequence[int], **generate_kwargs: Any
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """None: a remote search runs on the server's raw distribution (its generation config's
        processors are not applied; the "beam" note says so)."""
        return lambda input_ids, scores: scores

    # --- beams ------------------------------------------------------------------------------

    def beam_start(
        self, ids: Sequence[int], num_beams: int, control: Control | None = None
    ) -> tuple[RemoteBeams, torch.Tensor]:
        """num_beams copies of ids; every beam's top-k (k = the search's contenders per step, at
        least 20 for the tree's candidates) so the global top-k over beams is exact."""
        self._check_ids(list(ids), 1)
        k = self._beam_k(int(num_beams))
        row = self.known.row_tensor(Row.of(self.known.query(list(ids), k, None, control)), None)
        return RemoteBeams([list(ids)] * int(num_beams), k), row.expand(int(num_beams), -1).clone()

    def beam_step(self, batch: RemoteBeams, reorder: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        """Rows reordered (row i <- reorder[i]) and extended by token_ids (N,); each distinct
        sequence is one request, sent `info.parallel` at a time."""
        order, tokens = reorder.tolist(), token_ids.tolist()
        batch.sequences = [batch.sequences[r] + [int(t)] for r, t in zip(order, tokens, strict=True)]
        if len(batch.sequences[0]) > self.context_length:
            raise PlaygroundError(
                "Beams reached the served model's context of {context} tokens.",
                key="remote.error.beam_context",
                context=self.context_length,
            )
        distinct = list(dict.fromkeys(tuple(s) for s in batch.sequences))
        found = dict(
            zip(
                distinct, self._pool.map(lambda s: self.adapter.next_token(s, batch.k), distinct), strict=True
            )
        )
        return torch.stack([self.known.row_tensor(Row.of(found[tuple(s)]), None) for s in batch.sequences])

    def _beam_k(self, num_beams: int) -> int:
        per_beam = max(2, 1 + len(self._eos))  # contenders per beam, as the search counts them
        needed = per_beam * num_beams
        k = min(max(needed, 20), self.top_n, self.vocab_size)
        if k < needed:
            raise PlaygroundError(
                "{label} returns at most {top_n} candidates per position, and beam search with {beams} beams "
                "needs {needed}: use at most {most} beams (vLLM: raise --max-logprobs).",
                key="remote.error.beam_top_n",
                label=self.adapter.label,
                top_n=self.top_n,
                beams=num_beams,
                needed=needed,
                most=self.top_n // per_beam,
            )
        return k

    # --- chat ---------------------------------------------------------------------------------

    def stream(
        self,
        prompt_ids: Sequence[int],
        plan: DecodePlan,
        *,
        answer_prefix: Sequence[int] = (),
        key: str | None = None,
        control: Control | None = None,
    ) -> Iterator[Progress | TokenRecord]:
        """See Engine.stream: the given prefix's records (from remembered or fetched rows), then the
        server generates (its native streaming) and every token comes with its raw top alternatives."""
        prompt, prefix = list(prompt_ids), list(answer_prefix)
        read = [*prompt, *prefix]
        seq = self.known.take(key) if key else RemoteSequence()
        try:
            self._check_ids(read, 1)
            self.known.ensure(seq, read, range(len(prompt), len(read)), False, control)
            for m in range(len(prompt), len(read)):
                row = seq.rows[m]
                yield self._describe(
                    self.known.row_tensor(row, read[m]).unsqueeze(0),
                    [read[m]],
                    None,
                    plan.top,
                    "given",
                    row.n,
                )[0]
            yield from self._decode(seq, plan, control)
        finally:
            if key:
                self.known.put(key, seq)

    def _decode(
        self, seq: RemoteSequence, plan: DecodePlan, control: Control | None
    ) -> Iterator[Progress | TokenRecord]:
        settings, source = plan.settings, "greedy" if plan.settings.greedy else "sample"
        problem = self.client_side_reason(settings)
        events = (
            self._sample_here(seq.ids, plan)
            if problem
            else self.adapter.stream(
                list(seq.ids), settings, plan.max_new_tokens, plan.top, plan.seed, self._eos
            )
        )
        started, made = time.perf_counter(), 0
        with closing(events):
            for event in events:
                if isinstance(event, StreamProgress):
                    report(control, "prefill", event.done, event.total)
                    yield Progress("prefill", event.done, event.total)
                elif isinstance(event, ServerTimings):
                    self.last_timings = event
                elif isinstance(event, tuple):  # sampled here: (token, its processed scores)
                    yield self._remember(seq, event[0], event[1], plan, source, started)
                    made, started = made + 1, time.perf_counter()
                else:
                    yield self._remember(seq, event, None, plan, source, started)
                    made, started = made + 1, time.perf_counter()
                if made and (seq.ids[-1] in self._eos or made >= plan.max_new_tokens):
                    self._drain_timings(events)
                    return
                check(control)

    def _drain_timings(self, events: Iterator[Any]) -> None:
        """After the last token: the server's own timings if they come next (nothing more is shown)."""
        for event in events:
            if not isinstance(event, ServerTimings):
                return
            self.last_timings = event

    def _remember(
        self,
        seq: RemoteSequence,
        token: StreamToken,
        processed: torch.Tensor | None,
        plan: DecodePlan,
        source: str,
        since: float,
    ) -> TokenRecord:
        """The token's record; its distribution is kept under the sequence (a later fork reuses it)."""
        row = Row.of(token.position)
        seq.rows[len(seq.ids)] = row
        if processed is not None:  # sampled here, from these processed scores
            scores = self.known.row_tensor(row, token.id).unsqueeze(0)
            record = self._describe(scores, [token.id], processed, plan.top, source, row.n)[0]
        else:
            record = describe_streamed(self.tokenizer, self.vocab_size, token, plan, source)
        record.seconds = time.perf_counter() - since
        seq.ids.append(token.id)
        return record

    def _describe(
        self,
        rows: torch.Tensor,
        ids: list[int],
        processed: torch.Tensor | None,
        top: int,
        source: str,
        n: int,
    ) -> list[TokenRecord]:
        """Records from log-prob rows holding a top-n (ranks beyond n unknown unless n is everything)."""
        limit = None if n >= self.vocab_size else n
        return describe_rows(
            self.tokenizer,
            rows,
            ids,
            processed=processed,
            complete=False,
            top=top,
            source=source,
            rank_limit=limit,
        )

    def client_side_reason(self, settings: SamplingSettings) -> str | None:
        """Why chat must sample on this side for these settings (None: the server samples)."""
        problem = self.adapter.stream_problem(settings)
        if problem is None and not self.raw_when_sampling and not settings.greedy:
            active = settings.temperature != 1 or settings.top_k or settings.top_p < 1 or settings.min_p > 0
            if active or settings.repetition_penalty != 1:
                problem = f"{self.adapter.label} reports log-probs after its sampling stages, not raw ones"
        return problem

    def _sample_here(self, ids: list[int], plan: DecodePlan) -> Iterator[tuple[StreamToken, torch.Tensor]]:
        """Decode one request per token: the server's top-N, our sampling chain, our seeded RNG."""
        context, generator = list(ids), seeded_generator(plan.seed, torch.device("cpu"))
        for _ in range(plan.max_new_tokens):
            position = self.adapter.next_token(context, self.top_n)
            scores = final_scores(
                self.known.row_tensor(Row.of(position), None), torch.tensor(context), plan.settings
            )
            token = int(choose(scores, plan.settings, generator))
            yield StreamToken(token, position), scores
            context.append(token)
            if token in self._eos:
                return

    # --- the server's own figures -----------------------------------------------------------

    def kv_figures(self) -> ServerKV | None:
        """The server's KV capacity and usage (vLLM, SGLang; None where the engine does not say)."""
        return self.adapter.kv_figures()
