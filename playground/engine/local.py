"""The in-process engine: one transformers causal LM, shared by every session.

Sequences are named by keys; each key's KV cache lives in the engine's `KVStore` between
calls (see engine/kv_store.py). Every forward holds the model lock for one chunk only, so
requests interleave, and the prompt is read in chunks with a cancellation check between
them: Stop ends the work within one chunk (see engine/control.py).
"""

from __future__ import annotations

import copy
import inspect
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from playground.engine.base import Capabilities, DecodePlan, Progress
from playground.engine.cache import copy_cache, filled_layer_bytes, new_cache
from playground.engine.control import Control, check, holding
from playground.engine.kv_store import MIB, CacheEntry, KVStore
from playground.engine.prompts import eos_token_ids, has_chat_template, pad_fill_id
from playground.engine.records import TokenRecord, describe_rows
from playground.engine.sampling import choose, final_scores, seeded_generator
from playground.engine.tokens import check_token_id
from playground.errors import PlaygroundError
from playground.settings import load_settings

# Tokens per prefill chunk: about half a second of work on a 2-core CPU, so Stop acts fast.
CPU_PREFILL_CHUNK = 256
GPU_PREFILL_CHUNK = 2048

# (rows (last, vocab) float32 on the device, seconds of model work)
Advance = Generator[Progress, None, tuple[torch.Tensor, float]]


@dataclass
class BeamBatch:
    """num_beams rows decoded together (see LocalEngine.beam_start)."""

    cache: Any
    length: int  # tokens per row so far
    rows: int


class LocalEngine:
    """A transformers model in this process (CPU, CUDA or MPS): the app's default engine."""

    kind = "transformers"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        device: torch.device,
        dtype: torch.dtype,
        name: str,
        load_seconds: float = 0.0,
        source: str = "local",
        *,
        kv_store_bytes: int | None = None,
        prefill_chunk: int | None = None,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.device, self.dtype = device, dtype
        self.name, self.load_seconds, self.source = name, load_seconds, source
        # Serializes forward passes: one model, many sessions, one chunk or step at a time.
        self.lock = threading.RLock()
        self.kv_store = KVStore(kv_store_bytes or load_settings().kv_store_mib * MIB)
        default_chunk = CPU_PREFILL_CHUNK if device.type == "cpu" else GPU_PREFILL_CHUNK
        self.prefill_chunk = int(prefill_chunk or default_chunk)
        self.decode_path = "eager"  # how one-token steps run (issue 9 adds CUDA graphs)
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

    # --- what the model is --------------------------------------------------------------

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def context_length(self) -> int:
        """Longest sequence (prompt + generated tokens) the model supports."""
        limit = getattr(self.config.get_text_config(), "max_position_embeddings", None)
        return int(limit or min(self.tokenizer.model_max_length, 2**20))

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def has_chat_template(self) -> bool:
        return has_chat_template(self.tokenizer)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """The ids that end a generation, as `generate` resolves them (read from the configs each
        time: a changed generation config counts)."""
        return eos_token_ids(self.model.generation_config, self.model.config, self.tokenizer)

    @property
    def pad_token_id(self) -> int:
        return pad_fill_id(self.model.generation_config, self.eos_token_ids)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            full_vocab=True,
            top_n=self.vocab_size,
            attentions=True,
            hidden_states=True,
            cache_bytes=True,
            score=True,
            batched=True,
        )

    def describe(self) -> str:
        """One line for headers and logs: name, size, device, dtype, load time."""
        return (
            f"{self.name} · {self.num_parameters / 1e6:.1f} M parameters · {self.device.type} · "
            f"{str(self.dtype).removeprefix('torch.')} · loaded in {self.load_seconds:.1f} s ({self.source})"
        )

    # --- sequences ------------------------------------------------------------------------

    def prefill(
        self, ids: Sequence[int], *, key: str | None = None, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        if key is None:
            return _finish(self._advance(CacheEntry(), list(ids), last, control))[0]
        self.release(key)
        return self.sync(key, ids, last=last, control=control)

    def extend(
        self, key: str, new_ids: Sequence[int], *, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        entry = self.kv_store.peek(key)
        if entry is None:
            raise PlaygroundError(f"No sequence {key!r} in the engine (never started, or evicted): use sync.")
        return self.sync(key, entry.ids + list(new_ids), last=last, control=control)

    def sync(
        self, key: str, ids: Sequence[int], *, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        with self._checked_out(key) as entry:
            return _finish(self._advance(entry, list(ids), last, control))[0]

    def crop(self, key: str, length: int) -> None:
        with self._checked_out(key) as entry:
            _crop_entry(entry, length)

    def fork(self, key: str, new_key: str) -> None:
        entry = self.kv_store.peek(key)
        twin = CacheEntry()
        if entry is not None and entry.cache is not None:
            twin = CacheEntry(copy_cache(entry.cache), list(entry.ids), entry.logits.copy())
        self.kv_store.put(new_key, twin)

    def release(self, key: str) -> None:
        self.kv_store.drop(key)

    def sequence_ids(self, key: str) -> list[int]:
        """The ids key's cache covers now ([] when absent or evicted)."""
        entry = self.kv_store.peek(key)
        return list(entry.ids) if entry is not None else []

    @contextmanager
    def _checked_out(self, key: str | None) -> Iterator[CacheEntry]:
        """Take key's entry out of the store while working on it (a concurrent call on the same
        key recomputes instead of sharing a cache), and give it back afterwards."""
        if not key:
            yield CacheEntry()
            return
        taken, ticket = self.kv_store.check_out(key)
        entry = taken or CacheEntry()
        try:
            yield entry
        finally:  # not stored again when the key was released meanwhile (its tab closed)
            self.kv_store.check_in(key, entry, ticket)

    # --- the forward passes -----------------------------------------------------------------

    def _advance(self, entry: CacheEntry, target: list[int], last: int, control: Control | None) -> Advance:
        """Make entry cover target; return the scores after its last `last` ids and the model time.

        Rows remembered for lengths the cache still covers are reused (an undo is a crop, no
        forward; a pick forwards only the new token); the rest is forwarded in chunks from the
        common prefix (yielding progress)."""
        self._check_ids(target, last)
        lengths = range(len(target) - last + 1, len(target) + 1)
        common = _common_prefix(entry.ids, target)
        known = [n for n in lengths if n <= common and n in entry.logits]  # rows still valid for target
        missing = next((n for n in lengths if n not in known), len(target) + 1)
        _crop_entry(entry, min(common, missing - 1))
        kept = [entry.logits[n] for n in lengths if n < missing]
        if missing > len(target):
            return torch.stack(kept), 0.0
        if entry.cache is None:
            entry.cache, entry.ids = new_cache(self.config), []
        computed = len(target) - missing + 1
        rows, seconds = yield from self._forward_chunks(entry, target[len(entry.ids) :], computed, control)
        for n, row in zip(range(missing, len(target) + 1), rows, strict=True):
            entry.remember(n, row)
        return torch.cat([torch.stack(kept), rows]) if kept else rows, seconds

    def _forward_chunks(
        self, entry: CacheEntry, new_ids: list[int], last: int, control: Control | None
    ) -> Advance:
        """Forward new_ids into entry's cache, a chunk at a time; rows for the last `last` ids."""
        total, done, seconds = len(new_ids), 0, 0.0
        rows: list[torch.Tensor] = []
        while done < total:
            check(control)
            piece = new_ids[done : done + self.prefill_chunk]
            keep = max(0, min(len(piece), last - (total - done - len(piece))))
            with holding(self.lock, control), self._memory_guard(entry):
                started = time.perf_counter()
                logits = self._forward(entry.cache, piece, max(keep, 1))
                self._synchronize()
                seconds += time.perf_counter() - started
            entry.ids.extend(piece)
            if keep:
                rows.append(logits[-keep:])
            done += len(piece)
            if total > self.prefill_chunk:
                yield Progress("prefill", done, total)
        return torch.cat(rows), seconds

    @torch.inference_mode()
    def _forward(self, cache: Any, ids: Sequence[int], last: int) -> torch.Tensor:
        """One forward of ids (seq,) with the cache; float32 scores (last, vocab) on the device."""
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)  # (1, seq)
        kwargs: dict[str, Any] = {"past_key_values": cache, "use_cache": cache is not None}
        if self._keeps_logits:
            kwargs["logits_to_keep"] = last
        out = self.model(input_ids=input_ids, **kwargs)
        return out.logits[0, -last:].float()

    def _synchronize(self) -> None:
        """Wait for queued GPU work, so a timing covers the model's real work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextmanager
    def _memory_guard(self, entry: CacheEntry | None = None) -> Iterator[None]:
        """Out of memory: free this request's cache and the allocator's, and say so plainly."""
        try:
            yield
        except torch.OutOfMemoryError:
            if entry is not None:
                entry.cache, entry.ids = None, []
                entry.logits.clear()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            raise PlaygroundError(
                f"Out of memory on {self.device.type}: this request's cache was freed. Try a shorter "
                "prompt, fewer tokens or fewer beams."
            ) from None

    def _check_ids(self, ids: Sequence[int], last: int) -> None:
        if not ids:
            raise PlaygroundError("No tokens to run: the sequence is empty.")
        if len(ids) > self.context_length:
            raise PlaygroundError(
                f"{len(ids)} tokens is more than the model's context of {self.context_length} tokens."
            )
        vocab = self.vocab_size
        bad = next(
            (t for t in ids if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab), None
        )
        if bad is not None:
            check_token_id(bad, vocab)
        if not 1 <= last <= len(ids):
            raise PlaygroundError(f"Scores asked for the last {last} of {len(ids)} tokens.")

    # --- beams --------------------------------------------------------------------------------

    @torch.inference_mode()
    def beam_start(
        self, ids: Sequence[int], num_beams: int, control: Control | None = None
    ) -> tuple[BeamBatch, torch.Tensor]:
        """num_beams copies of ids, prefilled together as generate does; scores (N, vocab)."""
        self._check_ids(list(ids), 1)
        n, length = int(num_beams), len(ids)
        batch = BeamBatch(new_cache(self.config), 0, n)
        prompt = torch.tensor([list(ids)], dtype=torch.long, device=self.device).expand(n, -1)
        positions = torch.arange(length, device=self.device).unsqueeze(0).expand(n, -1)
        check(control)
        with holding(self.lock, control), self._memory_guard():
            return batch, self._beam_forward(batch, prompt, positions)

    @torch.inference_mode()
    def beam_step(self, batch: BeamBatch, reorder: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        """Rows reordered in place (row i <- reorder[i]), then one token each; scores (N, vocab)."""
        if batch.length + 1 > self.context_length:
            raise PlaygroundError(f"Beams reached the model's context of {self.context_length} tokens.")
        batch.cache.reorder_cache(reorder)
        positions = torch.full((batch.rows, 1), batch.length, device=self.device)
        with self.lock, self._memory_guard():
            return self._beam_forward(batch, token_ids.reshape(batch.rows, 1), positions)

    def _beam_forward(
        self, batch: BeamBatch, input_ids: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        kwargs: dict[str, Any] = {
            "past_key_values": batch.cache,
            "position_ids": positions,
            "use_cache": True,
        }
        if self._keeps_logits:
            kwargs["logits_to_keep"] = 1
        out = self.model(input_ids=input_ids.contiguous(), **kwargs)
        batch.length += input_ids.shape[1]
        return out.logits[:, -1, :].to(copy=True, dtype=torch.float32)  # (N, vocab)

    def generation_processors(
        self, prompt_ids: Sequence[int], **generate_kwargs: Any
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The logits processors `generate` builds from the model's generation config and these
        settings (a repetition penalty a model ships with, say): (input_ids, scores) -> scores.
        transformers has no public builder for them; tests/test_engine.py pins this private one."""
        config = copy.deepcopy(self.model.generation_config)
        config.update(do_sample=False, **generate_kwargs)
        prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=self.device)
        return self.model._get_logits_processor(
            generation_config=config,
            input_ids_seq_length=prompt.shape[-1],
            encoder_input_ids=prompt,
            device=str(self.device),
            model_kwargs={},
        )

    # --- scoring, streaming, measuring -------------------------------------------------------

    def score(self, ids: Sequence[int], start: int, control: Control | None = None) -> torch.Tensor:
        """Raw scores (len(ids) - start, vocab) before each of ids[start:], from one pass."""
        ids = list(ids)
        if not 1 <= start < len(ids):
            raise PlaygroundError(
                f"Scoring starts at token {start} of {len(ids)}: it needs 1 <= start < length."
            )
        return self.prefill(ids[:-1], last=len(ids) - start, control=control)

    def stream(
        self,
        prompt_ids: Sequence[int],
        plan: DecodePlan,
        *,
        answer_prefix: Sequence[int] = (),
        key: str | None = None,
        control: Control | None = None,
    ) -> Iterator[Progress | TokenRecord]:
        """See Engine.stream: prefill (with progress), the given prefix's records, then decode."""
        prefix = list(answer_prefix)
        with self._checked_out(key) as entry:
            rows, seconds = yield from self._advance(entry, [*prompt_ids, *prefix], len(prefix) + 1, control)
            if prefix:
                yield from describe_rows(self.tokenizer, rows[:-1], prefix, top=plan.top, source="given")
            yield from self._decode(entry, rows[-1:], seconds, plan, control)

    def _decode(
        self, entry: CacheEntry, logits: torch.Tensor, spent: float, plan: DecodePlan, control: Control | None
    ) -> Iterator[TokenRecord | Progress]:
        """Choose, record and feed back one token at a time (one host copy per token)."""
        settings, source = plan.settings, "greedy" if plan.settings.greedy else "sample"
        eos = self.eos_token_ids
        generator = seeded_generator(plan.seed, self.device)
        ids = torch.tensor(
            entry.ids, dtype=torch.long, device=self.device
        )  # (seq,) for the repetition penalty
        for step in range(plan.max_new_tokens):
            started = time.perf_counter()
            scores = final_scores(logits[0], ids, settings)  # (1, vocab)
            token = choose(scores, settings, generator)  # (1,) on the device
            record = describe_rows(
                self.tokenizer, logits, token, processed=scores, top=plan.top, source=source
            )[0]
            record.seconds = spent + time.perf_counter() - started
            yield record
            if record.id in eos or step == plan.max_new_tokens - 1:
                return
            check(control)
            ids = torch.cat([ids, token])
            logits, spent = yield from self._advance(entry, [*entry.ids, record.id], 1, control)

    @torch.inference_mode()
    def run_model(self, ids: Sequence[int], control: Control | None = None, **kwargs: Any) -> Any:
        """One forward over ids with no cache kept, returning transformers' own output (for the
        views that read attentions or hidden states)."""
        self._check_ids(list(ids), 1)
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        check(control)
        with holding(self.lock, control), self._memory_guard():
            return self.model(input_ids=input_ids, use_cache=False, **kwargs)

    @torch.inference_mode()
    def measure_cache(self, seq_len: int, batch_size: int = 1, seed: int = 0) -> tuple[list[int], str]:
        """Fill a real KV cache with a forward over (batch, seq_len) synthetic ids; returns the bytes
        each layer's keys and values hold, and their dtype."""
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, self.vocab_size, (batch_size, seq_len), generator=generator).to(self.device)
        cache = new_cache(self.config)
        kwargs: dict[str, Any] = {"logits_to_keep": 1} if self._keeps_logits else {}
        with self.lock, self._memory_guard():
            self.model(input_ids=ids, past_key_values=cache, use_cache=True, **kwargs)
        dtype = next(
            (str(layer.keys.dtype) for layer in cache.layers if getattr(layer, "keys", None) is not None), ""
        )
        return filled_layer_bytes(cache), dtype.removeprefix("torch.") or str(self.dtype).removeprefix(
            "torch."
        )


def _finish(advance: Advance) -> tuple[torch.Tensor, float]:
    """Run an _advance generator to its end, ignoring its progress."""
    while True:
        try:
            next(advance)
        except StopIteration as done:
            return done.value


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _crop_entry(entry: CacheEntry, length: int) -> None:
    """Cut the entry to its first `length` ids; a cache that cannot be cropped is dropped."""
    if length >= len(entry.ids):
        return
    if entry.cache is not None:
        try:
            entry.cache.crop(length - len(entry.ids))  # transformers 5: a negative count removes that many
        except (RuntimeError, ValueError, NotImplementedError):
            entry.cache, entry.ids = None, []
            entry.logits.clear()
            return
    del entry.ids[length:]
    entry.forget_after(length)
