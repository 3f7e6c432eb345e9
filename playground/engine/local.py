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
from playground.engine.static import (
    DecodeStatus,
    ProgressFn,
    StaticBeams,
    StaticConfig,
    StaticDecoder,
    StaticSequence,
    prepare_decode,
    static_wanted,
    zero_gpu,
)
from playground.engine.tokens import check_token_id, common_prefix
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
        decode: str = "eager",
        static_config: StaticConfig | None = None,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.device, self.dtype = device, dtype
        self.name, self.load_seconds, self.source = name, load_seconds, source
        # Serializes forward passes: one model, many sessions, one chunk or step at a time.
        self.lock = threading.RLock()
        self.kv_store = KVStore(kv_store_bytes or load_settings().kv_store_mib * MIB)
        default_chunk = CPU_PREFILL_CHUNK if device.type == "cpu" else GPU_PREFILL_CHUNK
        self.prefill_chunk = int(prefill_chunk or default_chunk)
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        # decode: "eager" (the default), "static" (static KV cache; CUDA graphs on CUDA, eager steps
        # elsewhere) or "auto" (static on CUDA only). See engine/static.py.
        self._static, self._eager_status = self._decoder_for(decode, static_config)

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
            probes=True,
        )

    def describe(self) -> str:
        """One line for headers and logs: name, size, device, dtype, load time."""
        return (
            f"{self.name} · {self.num_parameters / 1e6:.1f} M parameters · {self.device.type} · "
            f"{str(self.dtype).removeprefix('torch.')} · loaded in {self.load_seconds:.1f} s ({self.source})"
        )

    # --- the decode path (issue 9: static KV cache + CUDA graphs, see engine/static.py) --------

    @property
    def decode_status(self) -> DecodeStatus:
        """How tokens are decoded: path, warm-up seconds, GPU memory held, and why."""
        return self._static.status if self._static is not None else self._eager_status

    @property
    def decode_path(self) -> str:
        """ "static" (static KV cache, CUDA graphs on CUDA) or "eager"."""
        return self.decode_status.path

    def describe_decode(self) -> str:
        """One line for the header: 'Decode: static KV cache + CUDA graphs (…) · warm-up 4.2 s · GPU
        memory held 812 MiB …' (the GPU memory is read now, except on ZeroGPU)."""
        status = self.decode_status
        if status.held_bytes is not None and self.device.type == "cuda" and not zero_gpu():
            status.held_bytes = int(torch.cuda.memory_reserved(self.device))
        return status.line()

    def prepare_decode(self, progress: ProgressFn | None = None) -> DecodeStatus:
        """The loading step that readies decoding: allocate the static caches, capture the CUDA graphs,
        check them against eager, then (on CUDA) run chat, step and beam once. Never raises: a failure
        turns the static path off with the reason in the status. On ZeroGPU the first request does it."""
        return prepare_decode(self, self._static, progress)

    def _decoder_for(
        self, decode: str, config: StaticConfig | None
    ) -> tuple[StaticDecoder | None, DecodeStatus]:
        """The static decoder when `decode` asks for it and the model supports it, and the status
        the engine shows while decoding eagerly."""
        wanted, note = static_wanted(decode, self.device, self.model)
        eager = DecodeStatus("eager", self.device.type, note=note)
        if not wanted:
            return None, eager
        config = config or StaticConfig()
        limits = (self.context_length, self.vocab_size)
        return StaticDecoder(self.model, self.device, self.lock, self._forward, config, *limits), eager

    def _new_cache(self) -> Any:
        """A fresh sequence cache: a static one when that path is on, else a growable DynamicCache."""
        if self._static is not None and self._static.usable():
            return self._static.new_sequence()
        return new_cache(self.config)

    def _new_beam_cache(self, rows: int) -> Any:
        """The beam slot when it is free and large enough, else a growable DynamicCache."""
        beams = self._static.new_beams(rows) if self._static is not None and self._static.usable() else None
        return beams if beams is not None else new_cache(self.config)

    # --- sequences ------------------------------------------------------------------------

    def prefill(
        self, ids: Sequence[int], *, key: str | None = None, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        if key is None:  # a one-off forward: a growable cache, never a static slot (no live sequence parked)
            return _finish(self._advance(CacheEntry(new_cache(self.config)), list(ids), last, control))[0]
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
        # Checked out, so no other call writes the cache while it is copied (an entry in use
        # elsewhere is absent here: the fork then recomputes from its ids, never a stale copy).
        with self._checked_out(key) as entry, holding(self.lock, None):
            if entry.cache is None:  # nothing to copy: new_key computes its ids when used
                return
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

        Rows the entry remembers are reused (all of them and a cache covering target: a crop, no
        forward). Otherwise crop to the common prefix, or to just before the first row to compute,
        and forward the rest in chunks (yielding progress)."""
        common = common_prefix(entry.ids, target)
        self._check_ids(target, last, checked=common)  # the cached ids were checked when added
        lengths = range(len(target) - last + 1, len(target) + 1)
        known = 0  # leading rows the entry remembers (a pick then forwards only the new token)
        while known < last and lengths[known] <= common and lengths[known] in entry.logits:
            known += 1
        reused = [entry.logits[n] for n in lengths[:known]]
        if known == last:
            _crop_entry(entry, len(target))
            return torch.stack(reused), 0.0
        _crop_entry(entry, min(common, lengths[known] - 1))
        if entry.cache is None:
            entry.cache, entry.ids = self._new_cache(), []
        new_ids = target[len(entry.ids) :]
        rows, seconds = yield from self._forward_chunks(entry, new_ids, last - known, control)
        for n, row in zip(lengths[known:], rows, strict=True):
            entry.remember(n, row)
        return (torch.cat([torch.stack(reused), rows]) if reused else rows), seconds

    def _forward_chunks(
        self, entry: CacheEntry, new_ids: list[int], last: int, control: Control | None, wait: bool = True
    ) -> Advance:
        """Forward new_ids into entry's cache, a chunk at a time; rows for the last `last` ids.
        wait=False: return once the GPU work is queued (the decode loop's one host copy waits for it)."""
        total, done, seconds = len(new_ids), 0, 0.0
        rows: list[torch.Tensor] = []
        while done < total:
            check(control)
            piece = new_ids[done : done + self.prefill_chunk]
            keep = max(0, min(len(piece), last - (total - done - len(piece))))
            with holding(self.lock, control), self._memory_guard(entry):
                started = time.perf_counter()
                logits = self._forward(entry.cache, piece, max(keep, 1))
                if wait:
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
        if isinstance(cache, StaticSequence):
            return cache.decoder.forward(cache, ids, last)
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
                if isinstance(entry.cache, StaticSequence):
                    entry.cache.release()  # its slot serves the next request at once
                entry.cache, entry.ids = None, []
                entry.logits.clear()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            raise PlaygroundError(
                f"Out of memory on {self.device.type}: this request's cache was freed. Try a shorter "
                "prompt, fewer tokens or fewer beams."
            ) from None

    def _check_ids(self, ids: Sequence[int], last: int, checked: int = 0) -> None:
        """Clear messages for an empty or too long sequence, a bad token id (after the first
        `checked` ids, known good) or a `last` outside the sequence."""
        if not ids:
            raise PlaygroundError("No tokens to run: the sequence is empty.")
        if len(ids) > self.context_length:
            raise PlaygroundError(
                f"{len(ids)} tokens is more than the model's context of {self.context_length} tokens."
            )
        for token_id in ids[checked:]:
            check_token_id(token_id, self.vocab_size)
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
        batch = BeamBatch(self._new_beam_cache(n), 0, n)
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
        if isinstance(batch.cache, StaticBeams):  # the beam slot, while the search fits in it
            decoder, length = self._static, batch.length + input_ids.shape[1]
            if decoder is not None and decoder.beam_fits(batch.cache, length):
                logits = decoder.beam_forward(batch.cache, input_ids, batch.length)
                batch.length = length
                return logits
            batch.cache = batch.cache.to_dynamic(self.config)
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
            logits, spent = yield from self._append_one(entry, record.id, control)

    def _append_one(self, entry: CacheEntry, token_id: int, control: Control | None) -> Advance:
        """The decode loop's step: one token it chose itself (valid by construction, so no prefix
        comparison): one forward of one token, a graph replay on the static path."""
        if len(entry.ids) + 1 > self.context_length:
            total, limit = len(entry.ids) + 1, self.context_length
            raise PlaygroundError(f"{total} tokens is more than the model's context of {limit} tokens.")
        rows, seconds = yield from self._forward_chunks(entry, [token_id], 1, control, wait=False)
        entry.remember(len(entry.ids), rows[-1])
        return rows, seconds

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
