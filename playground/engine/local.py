"""The in-process engine: one transformers causal LM, shared by every session.

Sequences are named by keys; each key's KV cache lives in the engine's `KVStore` between
calls (see engine/kv_store.py). Every forward holds the model lock for one chunk only, so
requests interleave, and the prompt is read in chunks with a cancellation check between
them: Stop ends the work within one chunk (see engine/control.py).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from playground.engine.base import Capabilities, DecodePlan, Progress
from playground.engine.batched_beams import BatchedBeams, start_beams, step_beams
from playground.engine.batcher import BatchConfig, make_batcher
from playground.engine.cache import filled_layer_bytes, new_cache
from playground.engine.control import Control, check, holding, run_to_end
from playground.engine.forward import Advance, Forwarder, crop_entry, eager_logits, keep_rows
from playground.engine.kv_store import MIB, CacheEntry, KVStore
from playground.engine.probes import Probes
from playground.engine.prompts import eos_token_ids, has_chat_template, pad_fill_id
from playground.engine.records import TokenRecord, describe_rows
from playground.engine.sampling import (
    choose,
    final_scores,
    seeded_generator,
    validate_settings,
)
from playground.engine.static import (
    DecodeStatus,
    ProgressFn,
    StaticBeams,
    StaticConfig,
    StaticDecoder,
    StaticSequence,
    static_wanted,
    zero_gpu,
)
from playground.engine.tokens import check_ids, common_prefix
from playground.engine.warmup import prepare_decode, warm_up
from playground.errors import PlaygroundError
from playground.kv.geometry import ModelDims, model_dims
from playground.settings import load_settings

# Tokens per prefill chunk: about half a second of work on a 2-core CPU, so Stop acts fast.
CPU_PREFILL_CHUNK = 256
GPU_PREFILL_CHUNK = 2048


@dataclass
class BeamBatch:
    """num_beams rows decoded together (see LocalEngine.beam_start)."""

    cache: Any
    length: int  # tokens per row so far
    rows: int


class LocalEngine:
    """A transformers model in this process (CPU, CUDA or MPS): the app's default engine."""

    kind = "transformers"
    quantization: str | None = None  # --quantize: the weights format served (engine/quantize.py)
    quantization_line = ""  # its header line: format, library, bytes before and after

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
        batching: BatchConfig | None = None,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.device, self.dtype = device, dtype
        self.name, self.load_seconds, self.source = name, load_seconds, source
        self.url: str | None = None  # in this process: no server
        self.kv_store = KVStore(kv_store_bytes or load_settings().kv_store_mib * MIB)
        default_chunk = CPU_PREFILL_CHUNK if device.type == "cpu" else GPU_PREFILL_CHUNK
        # Every model call of this engine: locked, chunked, cancellable, memory-guarded, timed.
        self.forwarder = Forwarder(device, int(prefill_chunk or default_chunk))
        self.lock = self.forwarder.lock
        self.dims: ModelDims = model_dims(model.config)
        # Direct forwards for the "Under the hood" lessons (twins, batches, hidden states).
        self.probes: Probes | None = Probes(self)
        # decode: "eager" (the default), "static" (static KV cache; CUDA graphs on CUDA, eager steps
        # elsewhere) or "auto" (static on CUDA only). See engine/static.py.
        self._static, self._eager_status = self._decoder_for(decode, static_config)
        # Continuous batching (engine/batcher.py): every stream and step in one running batch.
        config = batching or BatchConfig()
        self.batcher, self.batching_line = make_batcher(
            self.probes, tokenizer, config, self._static is not None
        )

    # --- what the model is --------------------------------------------------------------

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def prefill_chunk(self) -> int:
        return self.forwarder.prefill_chunk

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

    tested_live = True  # nothing between the app and the model

    def device_summary(self) -> str:
        """'cpu', 'cuda', or for a model spread by device_map: 'cuda:0 (20 modules), cpu (10 modules)'."""
        device_map = getattr(self.model, "hf_device_map", None)
        if not device_map or len(set(device_map.values())) == 1:
            return self.device.type
        counts: dict[str, int] = {}
        for placement in device_map.values():
            name = f"cuda:{placement}" if isinstance(placement, int) else str(placement)
            counts[name] = counts.get(name, 0) + 1
        return ", ".join(f"{name} ({count} modules)" for name, count in counts.items())

    def kv_figures(self) -> None:
        return None  # in process: the KV tab measures a real cache instead

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
        return f"{status.line()} · {self.batching_line}"

    @property
    def concurrency(self) -> int | None:
        """Requests the engine serves at once (the batch's places), None: one forward at a time."""
        return self.batcher.max_jobs if self.batcher is not None else None

    def prepare_decode(self, progress: ProgressFn | None = None) -> DecodeStatus:
        """The loading step that readies decoding: allocate the static caches, capture the CUDA graphs,
        check them against eager, then (on CUDA) warm up chat, step and beam. Never raises: a failure
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
        return StaticDecoder(self.model, self.forwarder, config, *limits), eager

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
            one_off = CacheEntry(new_cache(self.config))
            return run_to_end(self._advance(one_off, list(ids), last, control, "one-off"))[0]
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
            return run_to_end(self._advance(entry, list(ids), last, control, key))[0]

    def crop(self, key: str, length: int) -> None:
        with self._checked_out(key) as entry:
            crop_entry(entry, length)

    def fork(self, key: str, new_key: str) -> None:
        # Checked out, so no other call writes the cache while it is copied (an entry in use
        # elsewhere is absent here: the fork then recomputes from its ids, never a stale copy).
        with self._checked_out(key) as entry, holding(self.lock, None):
            if entry.cache is None:  # nothing to copy: new_key computes its ids when used
                return
            twin = entry.copy()
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

    # --- the forward passes (engine/forward.py) ------------------------------------------------

    def check_ids(self, ids: Sequence[int], last: int = 1, checked: int = 0) -> None:
        """Clear messages for an empty or too long sequence, a bad token id (after the first
        `checked` ids, known good) or a `last` outside the sequence."""
        check_ids(ids, last, self.context_length, self.vocab_size, checked)

    def _advance(
        self,
        entry: CacheEntry,
        target: list[int],
        last: int,
        control: Control | None,
        name: str = "request",
        ahead: bool = False,
    ) -> Advance:
        """Make entry cover target (see Forwarder.advance), in the running batch when batching (ahead:
        a decode follows, see Batcher.forward); the cached ids were checked when added."""
        self.check_ids(target, last, checked=common_prefix(entry.ids, target))
        batcher = self.batcher
        rest = None if batcher is None else lambda e, ids, n, c: batcher.forward(e, ids, n, c, name, ahead)
        return (
            yield from self.forwarder.advance(
                entry, target, last, control, self._piece, self._new_cache, rest
            )
        )

    def _piece(self, cache: Any, ids: Sequence[int], keep: int) -> torch.Tensor:
        """One forward of ids with the cache (inside a forwarder turn); float32 scores (keep, vocab)."""
        if isinstance(cache, StaticSequence):
            return cache.decoder.forward(cache, ids, keep)
        return eager_logits(self.model, cache, ids, keep)

    # --- beams --------------------------------------------------------------------------------

    def beam_start(
        self, ids: Sequence[int], num_beams: int, control: Control | None = None
    ) -> tuple[BeamBatch | BatchedBeams, torch.Tensor]:
        """num_beams copies of ids, prefilled together as generate does (batching: read once, as rows
        of the running batch); scores (N, vocab)."""
        self.check_ids(list(ids))
        n, length = int(num_beams), len(ids)
        if self.batcher is not None:  # the rows join the running batch (engine/batched_beams.py)
            return start_beams(self.batcher, lambda: new_cache(self.config), ids, n, control)
        batch = BeamBatch(self._new_beam_cache(n), 0, n)
        prompt = torch.tensor([list(ids)], dtype=torch.long, device=self.device).expand(n, -1)
        positions = torch.arange(length, device=self.device).unsqueeze(0).expand(n, -1)
        first = self.forwarder.run(lambda: self._beam_forward(batch, prompt, positions), control, wait=False)
        return batch, first[0]

    def beam_step(
        self, batch: BeamBatch | BatchedBeams, reorder: torch.Tensor, token_ids: torch.Tensor
    ) -> torch.Tensor:
        """Rows reordered (row i <- reorder[i]), then one token each; scores (N, vocab)."""
        if batch.length + 1 > self.context_length:
            raise PlaygroundError(f"Beams reached the model's context of {self.context_length} tokens.")
        if isinstance(batch, BatchedBeams):
            return step_beams(batch, reorder, token_ids)
        positions = torch.full((batch.rows, 1), batch.length, device=self.device)

        def step() -> torch.Tensor:
            batch.cache.reorder_cache(reorder)
            return self._beam_forward(batch, token_ids.reshape(batch.rows, 1), positions)

        return self.forwarder.run(step, wait=False)[0]

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
        out = self.model(
            input_ids=input_ids.contiguous(),
            past_key_values=batch.cache,
            position_ids=positions,
            use_cache=True,
            **keep_rows(self.model, 1),
        )
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
        validate_settings(plan.settings)  # bad settings are refused before the request joins the batch
        prefix, name = list(answer_prefix), key or "stream"
        with self._checked_out(key) as entry:
            target = [*prompt_ids, *prefix]
            rows, seconds = yield from self._advance(entry, target, len(prefix) + 1, control, name, True)
            if prefix:
                yield from describe_rows(self.tokenizer, rows[:-1], prefix, top=plan.top, source="given")
            if self.batcher is not None:
                context, eos = self.context_length, self.eos_token_ids
                yield from self.batcher.decode(entry, rows[-1], seconds, plan, eos, context, control, name)
            else:
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
        step = self.forwarder.chunks(entry, [token_id], 1, control, self._piece, wait=False)
        rows, seconds = yield from step
        entry.remember(len(entry.ids), rows[-1])
        return rows, seconds

    def measure_cache(self, seq_len: int, batch_size: int = 1, seed: int = 0) -> tuple[list[int], str]:
        """Fill a real KV cache with a forward over (batch, seq_len) synthetic ids; returns the bytes
        each layer's keys and values hold, and their dtype."""
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, self.vocab_size, (batch_size, seq_len), generator=generator).to(self.device)
        cache = new_cache(self.config)
        if self.batcher is not None and batch_size == 1:  # one sequence: it joins the running batch
            run_to_end(self.batcher.forward(CacheEntry(cache), ids[0].tolist(), 1, None, "KV measure"))
        else:
            keep = keep_rows(self.model, 1)
            self.forwarder.run(
                lambda: self.model(input_ids=ids, past_key_values=cache, use_cache=True, **keep)
            )
        dtype = next(
            (str(layer.keys.dtype) for layer in cache.layers if getattr(layer, "keys", None) is not None), ""
        )
        return filled_layer_bytes(cache), dtype.removeprefix("torch.") or str(self.dtype).removeprefix(
            "torch."
        )

    # --- warm-up --------------------------------------------------------------------------------

    def warm_up(self, report: ProgressFn | None = None) -> None:
        """Chat, step and beam once each on a short input (engine/warmup.py warm_up)."""
        warm_up(self, report)
