"""Beam search that records the real tree: every expansion, kept, pruned and finished.

`beam_search` runs its own beam search over the engine (beams batched in one forward, their
cache rows reordered every step; with continuous batching each row is a sequence of the running
batch, engine/batched_beams.py) that follows transformers 5's `GenerationMixin._beam_search`
step for step: the same top-K over all beams (K = max(2, 1 + number of EOS ids) * num_beams),
the same stopping criteria (EOS, length limit), the same finished-hypothesis bookkeeping with
length penalty, the same early-stopping heuristic and the same logits processors built from
the model's generation config. Its `sequences` and `scores` equal `model.generate`'s
`sequences` (prompt removed) and `sequences_scores`; tests/test_beam.py proves it.

While it searches it copies a few small tensors per step to the host (the top-K contenders,
the top candidates of every beam, which contenders were kept and which entered the finished
list, and each token's raw log-prob, rank and entropy). `TreeBuilder` (beam/builder.py) turns
those index choices into nodes: it replays no scoring, it only names what the search chose.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import torch

from playground.beam.builder import StepRecord, TreeBuilder
from playground.beam.tree import (
    BeamSettings,
    BeamTree,
    GreedyToken,
)
from playground.engine.base import DecodePlan, Engine
from playground.engine.control import Control, check
from playground.engine.prompts import encode_prompt as encode_prompt_ids
from playground.engine.records import TokenRecord, raw_logprobs
from playground.engine.sampling import SamplingSettings
from playground.engine.tokens import decode_ids
from playground.errors import Cancelled, PlaygroundError
from playground.messages import Message
from playground.tree import ROOT as ROOT_ID

# Why a search stopped (the others are made where they happen)
LENGTH_LIMIT = Message("beam.stop.length", "length limit reached")

MAX_BEAMS = 16
MAX_NEW_TOKENS = 64
LENGTH_PENALTY_RANGE = (-5.0, 5.0)
# Per running beam and step, how many of its best next tokens are recorded (pruned ones greyed).
DEFAULT_CANDIDATES_PER_BEAM = 3
_OVERLAYS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="beam-greedy")  # see _GreedyOverlay
# Fraction of the free memory a search may plan to use.
MEMORY_HEADROOM = 0.8
NEG_INF = -1.0e9  # transformers' "never pick this" offset; kept identical for parity

BeamProgressFn = Callable[[int, int], None]  # (steps done, steps at most)


def beam_search(
    engine: Engine,
    prompt: str,
    num_beams: int,
    max_new_tokens: int,
    length_penalty: float = 1.0,
    early_stopping: bool | str = False,
    num_return_sequences: int | None = None,
    chat: bool = False,
    *,
    candidates_per_beam: int = DEFAULT_CANDIDATES_PER_BEAM,
    include_greedy: bool = False,
    progress: BeamProgressFn | None = None,
    control: Control | None = None,
) -> BeamTree:
    """Run beam search on `prompt` and return the whole search tree.

    Same results as `model.generate(num_beams=num_beams, num_return_sequences=...,
    do_sample=False, length_penalty=..., early_stopping=..., max_new_tokens=...)` on
    `tree.prompt_ids`. num_return_sequences defaults to num_beams. chat=True wraps the prompt
    in the model's chat template as one user message. include_greedy adds the greedy
    continuation (one more generation). progress(step, max_new_tokens) is called per step.
    """
    started = time.perf_counter()
    settings = check_settings(
        num_beams,
        max_new_tokens,
        length_penalty,
        early_stopping,
        num_return_sequences,
        chat,
        candidates_per_beam,
    )
    prompt_text, prompt_ids = encode_prompt(engine, prompt, chat)
    check_fits(engine, len(prompt_ids), settings)
    greedy = _GreedyOverlay(engine, prompt_ids, max_new_tokens, control) if include_greedy else None
    try:
        search, stopped = _run(engine, prompt_ids, settings, progress, control)
        tree = search.to_tree(prompt, prompt_text, time.perf_counter() - started, stopped)
        if greedy is not None and not stopped:
            tree.greedy = _link_greedy(tree, greedy.result())
            tree.greedy_text = decode_ids(engine.tokenizer, [token.token.id for token in tree.greedy])
        return tree
    finally:
        if greedy is not None:  # a failed search (or Stop) ends its overlay too; harmless once done
            greedy.cancel()


def _run(
    engine: Engine,
    prompt_ids: list[int],
    settings: BeamSettings,
    progress: BeamProgressFn | None,
    control: Control | None,
) -> tuple[_Search, bool]:
    """The search, run; and whether Stop ended it after its first step (its tree so far stands).
    Stopped before any step, Cancelled goes on up: there is nothing to draw."""
    with torch.inference_mode():
        search = _Search(engine, prompt_ids, settings, progress, control)
        try:
            search.run()
        except Cancelled:
            if not search.records:
                raise
            return search, True
    return search, False


# --- input checks ---------------------------------------------------------------------------


def check_settings(
    num_beams: int,
    max_new_tokens: int,
    length_penalty: float,
    early_stopping: bool | str,
    num_return_sequences: int | None,
    chat: bool,
    candidates_per_beam: int = DEFAULT_CANDIDATES_PER_BEAM,
) -> BeamSettings:
    """Validate the search settings; raise PlaygroundError naming the bad value."""
    _check_int(Message("beam.name.beams", "Beams"), num_beams, 1, MAX_BEAMS)
    _check_int(Message("beam.name.steps", "Steps (max new tokens)"), max_new_tokens, 1, MAX_NEW_TOKENS)
    low, high = LENGTH_PENALTY_RANGE
    if (
        isinstance(length_penalty, bool)
        or not isinstance(length_penalty, int | float)
        or not low <= length_penalty <= high
    ):
        raise PlaygroundError(
            "Length penalty must be a number from {low} to {high}, got {value!r}.",
            key="beam.error.length_penalty",
            low=low,
            high=high,
            value=length_penalty,
        )
    if not (isinstance(early_stopping, bool) or early_stopping == "never"):
        raise PlaygroundError(
            "Early stopping must be False, True or 'never', got {value!r}.",
            key="beam.error.early_stopping",
            value=early_stopping,
        )
    returned = num_beams if num_return_sequences is None else num_return_sequences
    _check_int(Message("beam.name.returned", "Returned sequences"), returned, 1, num_beams)
    _check_int(Message("beam.name.candidates", "Candidates per beam"), candidates_per_beam, 1, 20)
    return BeamSettings(
        int(num_beams),
        int(max_new_tokens),
        float(length_penalty),
        early_stopping,
        int(returned),
        bool(chat),
        int(candidates_per_beam),
    )


def _check_int(what: Message, value: object, low: int, high: int) -> None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_whole_float = isinstance(value, float) and value.is_integer()
    if not (is_int or is_whole_float) or not low <= value <= high:  # type: ignore[operator]
        raise PlaygroundError(
            "{what} must be a whole number from {low} to {high}, got {value!r}.",
            key="beam.error.whole",
            what=what,
            low=low,
            high=high,
            value=value,
        )


def encode_prompt(engine: Engine, prompt: str, chat: bool) -> tuple[str, list[int]]:
    """The text the model reads (chat template applied when chat) and its token ids, encoded
    exactly as the Step-by-step tab encodes a prompt (so an opened prefix is the same ids)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise PlaygroundError("The prompt is empty: type some text to continue.", key="prompt.error.empty")
    ids = encode_prompt_ids(engine.tokenizer, prompt, bool(chat))
    return decode_ids(engine.tokenizer, ids), ids


def search_bytes(engine: Engine, prompt_len: int, settings: BeamSettings) -> int:
    """Upper estimate of the memory a search needs in-process: the KV cache of every beam (twice,
    as the reorder copies it), the prompt's attention scores at prefill and a few (beams, vocab) rows."""
    dims = engine.dims
    assert dims is not None and engine.dtype is not None  # in process (see check_fits)
    elem = torch.tensor([], dtype=engine.dtype).element_size()
    total_len = prompt_len + settings.max_new_tokens
    beams = settings.num_beams
    kv = 2 * dims.layers * dims.kv_heads * dims.head_dim * total_len * beams * elem
    prefill = beams * dims.heads * prompt_len * prompt_len * 4 + beams * prompt_len * dims.hidden * 4 * 8
    rows = 8 * beams * engine.vocab_size * 4
    return 2 * kv + prefill + rows


def check_fits(engine: Engine, prompt_len: int, settings: BeamSettings) -> None:
    """Reject a search longer than the context or (in-process) bigger than the free memory."""
    total = prompt_len + settings.max_new_tokens
    if total > engine.context_length:
        raise PlaygroundError(
            "The prompt ({prompt} tokens) plus {steps} steps is {total} tokens, over the model's context of "
            "{context}: shorten the prompt or take fewer steps.",
            key="beam.error.context",
            prompt=prompt_len,
            steps=settings.max_new_tokens,
            total=total,
            context=engine.context_length,
        )
    if engine.probes is None or engine.dims is None:
        return  # a remote engine plans its own memory
    needed, free = search_bytes(engine, prompt_len, settings), free_bytes(engine)
    if free is not None and needed > MEMORY_HEADROOM * free:
        raise PlaygroundError(
            "This search needs about {needed:,.0f} MiB but only {free:,.0f} MiB are free on {device}: use "
            "fewer beams ({beams}), fewer steps or a shorter prompt.",
            key="beam.error.memory",
            needed=needed / 2**20,
            free=free / 2**20,
            device=engine.device_summary(),
            beams=settings.num_beams,
        )


def free_bytes(engine: Engine) -> int | None:
    """Memory free for the search on the model's device (None when unknown or not in process)."""
    return engine.probes.free_memory_bytes() if engine.probes is not None else None


# --- the search ------------------------------------------------------------------------------


class _Search:
    """Transformers' _beam_search for one prompt, recording every step (batch dimension 1)."""

    def __init__(
        self,
        engine: Engine,
        prompt_ids: list[int],
        settings: BeamSettings,
        progress: BeamProgressFn | None,
        control: Control | None,
    ):
        self.engine, self.settings, self.progress, self.control = engine, settings, progress, control
        self.prompt_ids = prompt_ids
        self.prompt_len = len(prompt_ids)
        self.max_length = self.prompt_len + settings.max_new_tokens
        self.eos_ids = list(engine.eos_token_ids)
        self.fill = engine.pad_token_id
        n = settings.num_beams
        self.beams_to_keep = max(2, 1 + len(self.eos_ids)) * n  # K
        self.processors = engine.generation_processors(
            prompt_ids,
            num_beams=n,
            length_penalty=settings.length_penalty,
            early_stopping=settings.early_stopping,
            max_new_tokens=settings.max_new_tokens,
            num_return_sequences=settings.num_return_sequences,
        )
        self.records: list[StepRecord] = []
        self.stop_reason = LENGTH_LIMIT

    def _init_state(self, device: torch.device) -> None:
        """Running and finished beams as in generate: (1, N, max_length) ids, (1, N) scores."""
        n = self.settings.num_beams
        self.device = device
        self.eos = torch.tensor(self.eos_ids, dtype=torch.long, device=device)
        self.top_num_beam_mask = torch.arange(self.beams_to_keep, device=device) < n  # (K,)
        prompt = torch.tensor(self.prompt_ids, dtype=torch.long, device=device)
        self.running_sequences = torch.full(
            (1, n, self.max_length), self.fill, dtype=torch.long, device=device
        )
        self.running_sequences[:, :, : self.prompt_len] = prompt
        self.sequences = self.running_sequences.clone()
        self.running_scores = torch.zeros((1, n), dtype=torch.float, device=device)
        self.running_scores[:, 1:] = NEG_INF  # only beam 0 is real at the first step
        self.beam_scores = torch.full((1, n), NEG_INF, dtype=torch.float, device=device)
        self.is_sent_finished = torch.zeros((1, n), dtype=torch.bool, device=device)
        self.heuristic_unsatisfied = torch.ones((1, 1), dtype=torch.bool, device=device)
        self.cur_len = self.prompt_len

    def run(self) -> None:
        """Prefill all beams (as generate does), then step until a stopping rule fires."""
        n = self.settings.num_beams
        started = time.perf_counter()
        batch, logits = self.engine.beam_start(self.prompt_ids, n, self.control)
        self._init_state(logits.device)
        while True:
            if self._step(logits, time.perf_counter() - started):
                break
            check(self.control)
            started = time.perf_counter()
            ids = self.running_sequences[0, :, self.cur_len - 1]  # (N,)
            logits = self.engine.beam_step(batch, self.beam_idx, ids)
        del batch  # free the beams' cache before building the tree

    def _step(self, logits: torch.Tensor, seconds: float) -> bool:
        """One beam search step on (N, V) logits; returns True when the search is over."""
        n, cur = self.settings.num_beams, self.cur_len
        flat_running = self.running_sequences[0, :, :cur]  # (N, cur)
        # (N, V); logits, or a remote engine's top-k log-probs with -inf elsewhere (taken as they are)
        raw = raw_logprobs(logits, complete=bool(torch.isfinite(logits).all()))
        log_probs = self.processors(flat_running, raw)  # (N, V)
        accumulated = log_probs.unsqueeze(0) + self.running_scores[:, :, None]  # (1, N, V)
        vocab = accumulated.shape[-1]
        topk_log_probs, topk_indices = torch.topk(accumulated.reshape(1, -1), k=self.beams_to_keep)  # (1, K)
        src_beam, token = topk_indices // vocab, topk_indices % vocab  # (1, K)
        topk_sequences = torch.take_along_dim(
            self.running_sequences, src_beam[:, :, None], dim=1
        )  # (1, K, L)
        topk_sequences[:, :, cur] = token
        hits = self._hits_stopping_criteria(token)  # (1, K)
        next_idx = self._next_running(topk_log_probs, topk_sequences, hits)  # (1, N)
        merged = self._update_finished(topk_sequences, topk_log_probs, hits)  # (1, N)
        self.beam_idx = torch.take_along_dim(src_beam, next_idx, dim=1)[0]  # (N,) cache rows to keep
        self._record(
            raw, log_probs, accumulated[0], topk_log_probs, src_beam, token, hits, next_idx, merged, seconds
        )
        self.cur_len += 1
        if self.progress is not None:
            self.progress(self.cur_len - self.prompt_len, self.settings.max_new_tokens)
        return self._is_done(hits, n)

    def _hits_stopping_criteria(self, token: torch.Tensor) -> torch.Tensor:
        """(1, K) bool: the contender ends with an EOS id or reaches max_length."""
        hits = torch.isin(token, self.eos) if self.eos.numel() else torch.zeros_like(token, dtype=torch.bool)
        if self.cur_len + 1 >= self.max_length:
            hits = torch.ones_like(hits)
        return hits

    def _next_running(
        self, topk_log_probs: torch.Tensor, topk_sequences: torch.Tensor, hits: torch.Tensor
    ) -> torch.Tensor:
        """generate's _get_running_beams_for_next_iteration; returns (1, N) contender indices."""
        running_log_probs = topk_log_probs + hits.to(torch.float32) * NEG_INF
        next_idx = torch.topk(running_log_probs, k=self.settings.num_beams)[1]
        self.running_sequences = torch.take_along_dim(topk_sequences, next_idx[:, :, None], dim=1)
        self.running_scores = torch.take_along_dim(running_log_probs, next_idx, dim=1)
        return next_idx

    def _update_finished(
        self, topk_sequences: torch.Tensor, topk_log_probs: torch.Tensor, hits: torch.Tensor
    ) -> torch.Tensor:
        """generate's _update_finished_beams; returns (1, N) indices into [finished ; contenders]."""
        s = self.settings
        just_finished = hits & self.top_num_beam_mask[None, :]  # (1, K)
        scores = topk_log_probs / ((self.cur_len + 1 - self.prompt_len) ** s.length_penalty)
        full = torch.all(self.is_sent_finished, dim=-1, keepdim=True) & (s.early_stopping is True)
        scores += full.to(torch.float32) * NEG_INF
        scores += (~self.heuristic_unsatisfied).to(torch.float32) * NEG_INF
        scores += (~just_finished) * NEG_INF
        merged_scores = torch.cat((self.beam_scores, scores), dim=1)  # (1, N + K)
        merged = torch.topk(merged_scores, k=s.num_beams)[1]  # (1, N)
        merged_sequences = torch.cat((self.sequences, topk_sequences), dim=1)
        self.sequences = torch.take_along_dim(merged_sequences, merged[:, :, None], dim=1)
        self.beam_scores = torch.take_along_dim(merged_scores, merged, dim=1)
        merged_finished = torch.cat((self.is_sent_finished, just_finished), dim=1)
        self.is_sent_finished = torch.take_along_dim(merged_finished, merged, dim=1)
        return merged

    def _is_done(self, hits: torch.Tensor, n: int) -> bool:
        """generate's _check_early_stop_heuristic + _beam_search_has_unfinished_sequences."""
        s = self.settings
        if s.early_stopping == "never" and s.length_penalty > 0.0:
            best_length = self.max_length - self.prompt_len
        else:
            best_length = self.cur_len - self.prompt_len
        best_running = self.running_scores[:, :1] / (best_length**s.length_penalty)
        worst_finished = torch.where(
            self.is_sent_finished, torch.min(self.beam_scores, dim=1, keepdim=True)[0], NEG_INF
        )
        self.heuristic_unsatisfied = self.heuristic_unsatisfied & torch.any(
            best_running > worst_finished, dim=-1, keepdim=True
        )
        all_finished = bool(torch.all(self.is_sent_finished)) and s.early_stopping is True
        for stopped, reason in (
            (bool(torch.all(hits)), LENGTH_LIMIT),
            (all_finished, Message("beam.stop.early", "early stopping: {n} hypotheses finished", n=n)),
            (
                not bool(torch.any(self.heuristic_unsatisfied)),
                Message("beam.stop.none_can_win", "no running beam can beat the finished ones"),
            ),
        ):
            if stopped:
                self.stop_reason = reason
                return True
        return False

    def _record(
        self,
        raw: torch.Tensor,  # (N, V) raw log-probs
        log_probs: torch.Tensor,  # (N, V) after the processors
        accumulated: torch.Tensor,  # (N, V) running score + log_probs
        topk_log_probs: torch.Tensor,  # (1, K)
        src_beam: torch.Tensor,  # (1, K)
        token: torch.Tensor,  # (1, K)
        hits: torch.Tensor,  # (1, K)
        next_idx: torch.Tensor,  # (1, N)
        merged: torch.Tensor,  # (1, N)
        seconds: float,
    ) -> None:
        """Copy this step's choices to the host: K contenders, N x C per-beam candidates."""
        c = min(self.settings.candidates_per_beam, accumulated.shape[-1])
        cand_cum, cand_token = torch.topk(accumulated, k=c, dim=-1)  # (N, C)
        cand_raw = torch.gather(raw, 1, cand_token)  # (N, C)
        contender_raw = raw[src_beam[0], token[0]]  # (K,)
        self.records.append(
            StepRecord(
                src_beam[0].tolist(),
                token[0].tolist(),
                topk_log_probs[0].tolist(),
                log_probs[src_beam[0], token[0]].tolist(),
                contender_raw.tolist(),
                _ranks(raw[src_beam[0]], contender_raw).tolist(),
                hits[0].tolist(),
                next_idx[0].tolist(),
                merged[0].tolist(),
                self.is_sent_finished[0].tolist(),
                (-(raw.exp() * raw).nansum(dim=-1)).tolist(),
                cand_token.tolist(),
                cand_cum.tolist(),
                torch.gather(log_probs, 1, cand_token).tolist(),
                cand_raw.tolist(),
                _ranks(raw.unsqueeze(1), cand_raw).tolist(),
                seconds,
            )
        )

    def to_tree(self, prompt: str, prompt_text: str, seconds: float, stopped: bool = False) -> BeamTree:
        """The tree of every step run. stopped: Stop ended the search, and the hypotheses are the
        best of its finished and running beams as they stood (generate would return none)."""
        s = self.settings
        builder = TreeBuilder(self.engine.tokenizer, s, self.prompt_ids)
        for step, record in enumerate(self.records, start=1):
            builder.add_step(step, record)
        if stopped:
            hypotheses = builder.best_so_far(s.num_return_sequences)
            rows = [h.token_ids for h in hypotheses]
            scores = [h.score for h in hypotheses]
            self.stop_reason = Message(
                "beam.stopped_by_you",
                "stopped by you at step {step} of {steps}",
                step=len(self.records),
                steps=s.max_new_tokens,
            )
        else:
            scores = self.beam_scores[0, : s.num_return_sequences].tolist()
            rows = self.sequences[0, : s.num_return_sequences, self.prompt_len :].tolist()  # (R, steps)
            hypotheses = builder.hypotheses(scores)
        length = max(len(h.token_ids) for h in hypotheses)
        return BeamTree(
            prompt,
            prompt_text,
            self.prompt_ids,
            s,
            builder.tree,
            hypotheses,
            [row[:length] + [self.fill] * (length - len(row[:length])) for row in rows],
            scores,
            self.fill,
            self.eos_ids,
            len(self.records),
            self.stop_reason,
            seconds,
            stopped=stopped,
        )


def _ranks(rows: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """1 + how many entries of each row beat its value: rows (..., V), values (...)."""
    return (rows > values.unsqueeze(-1)).sum(dim=-1) + 1


# --- greedy overlay -------------------------------------------------------------------------


def greedy_path(
    engine: Engine, prompt_ids: list[int], max_new_tokens: int, control: Control | None = None
) -> list[GreedyToken]:
    """The greedy continuation (argmax each step, stops at EOS) with its records."""
    plan = DecodePlan(SamplingSettings(temperature=0), max_new_tokens, seed=0)
    tokens, cum = [], 0.0
    for event in engine.stream(prompt_ids, plan, control=control):
        if isinstance(event, TokenRecord):
            cum += event.logprob
            tokens.append(GreedyToken(len(tokens) + 1, event, cum))
    return tokens


class _GreedyOverlay:
    """The greedy continuation for the tree. With a running batch (engine.concurrency) it is
    computed beside the beam search, so its tokens ride in the same iterations as the beams'
    rows (one wait instead of two); else after the search. Its own Control is cancelled with the
    search's, and when the search fails."""

    def __init__(
        self, engine: Engine, prompt_ids: list[int], max_new_tokens: int, parent: Control | None
    ) -> None:
        self.parent, self.control = parent, Control()
        self._args = (engine, prompt_ids, max_new_tokens)
        self._future: Future[list[GreedyToken]] | None = None
        if engine.concurrency:
            self._future = _OVERLAYS.submit(greedy_path, *self._args, self.control)

    def cancel(self) -> None:
        self.control.cancel()
        if self._future is not None:
            self._future.cancel()  # still waiting for a worker: it never starts

    def result(self) -> list[GreedyToken]:
        if self._future is None:
            return greedy_path(*self._args, self.parent)
        while True:
            try:
                return self._future.result(timeout=0.2)
            except FutureTimeout:
                if self.parent is not None and self.parent.cancelled:
                    self.cancel()


def _link_greedy(tree: BeamTree, greedy: list[GreedyToken]) -> list[GreedyToken]:
    """Attach each greedy token to the tree node with the same prefix, while there is one."""
    node_id: int | None = ROOT_ID
    for token in greedy:
        match = None
        if node_id is not None:
            match = next(
                (c for c in tree.children(node_id) if tree.nodes[c].token_id == token.token.id), None
            )
        token.node_id = match
        node_id = match
    return greedy
