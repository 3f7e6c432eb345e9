"""The in-process engine: one transformers causal LM, shared by every session.

Sequences are named by keys; each key's KV cache lives in the engine's `KVStore` between
calls (see engine/kv_store.py). With continuous batching (the default) every read, decode and beam
step joins the running batch (engine/batcher.py), and a lone request may take the static path
(engine/static.py); with batching off each request runs its own forwards. Either way every forward
is the one model call (engine/model_call.py) in a Forwarder turn (engine/forward.py: the model lock,
Stop, the memory guard, timing), and the decode loop's step is engine/decode_step.py's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from playground.engine.base import Capabilities
from playground.engine.batcher import BatchConfig, Batcher, make_batcher
from playground.engine.beams import BeamRows, reorder_rows, repeat_rows, rows_inputs
from playground.engine.cache import filled_layer_bytes, new_cache
from playground.engine.control import Control, holding, run_to_end
from playground.engine.decode_step import Decoding, check_room, decode_step, finished
from playground.engine.forward import Advance, Forwarder, crop_entry
from playground.engine.kv_store import MIB, CacheEntry, KVStore
from playground.engine.model_call import ModelInputs, run_model, sequence_logits
from playground.engine.plans import DecodePlan, Progress
from playground.engine.probes import ModelProbes
from playground.engine.prompts import eos_token_ids, has_chat_template, pad_fill_id
from playground.engine.records import TokenRecord, describe_rows
from playground.engine.sampling import validate_settings
from playground.engine.static import (
    DecodeStatus,
    ProgressFn,
    StaticConfig,
    StaticDecoder,
    dotted,
    static_wanted,
    zero_gpu,
)
from playground.engine.tokens import check_ids, common_prefix
from playground.engine.twins import Twins
from playground.engine.warmup import prepare_decode, warm_up
from playground.errors import PlaygroundError
from playground.kv.geometry import ModelDims, model_dims
from playground.messages import Message
from playground.settings import load_settings

# Tokens per prefill chunk: about half a second of work on a 2-core CPU, so Stop acts fast.
CPU_PREFILL_CHUNK = 256
GPU_PREFILL_CHUNK = 2048


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
        # Weight-sharing copies of the model: eager attention, the batched attention, early exits.
        self.twins = Twins(model)
        # Direct forwards for the "Under the hood" lessons (sequences, padded batches, hidden states).
        self.probes = ModelProbes(self)
        # The serving loop (engine/batcher.py): every stream, step and beam search in one running batch;
        # decode: "auto" (the static path for a lone request on CUDA), "static" (also elsewhere, eager
        # steps) or "eager". See engine/static.py.
        config = batching or BatchConfig()
        self._static, self._eager_status = self._decoder_for(decode, static_config, config)
        self.batcher, self.batching_line = make_batcher(
            model, self.twins.ragged, self.forwarder, tokenizer, config, solo=self._static
        )
        if self.batcher is None and self._static is not None:  # the static path runs inside the batch
            off = Message("decode.note.batching_off", "static path off: {why}", why=self.batching_line)
            self._static, self._eager_status.note = None, off

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
        return dotted(status.line(), self.batching_line)

    @property
    def schedule(self) -> Batcher | None:
        """The running batch's schedule (engine/protocols.py ScheduleLog), None when not batching."""
        return self.batcher

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
        self, decode: str, config: StaticConfig | None, batching: BatchConfig
    ) -> tuple[StaticDecoder | None, DecodeStatus]:
        """The static decoder when `decode` asks for it and the model supports it (it serves a lone
        request of the running batch, so batching must be on), and the status shown while eager."""
        wanted, note = static_wanted(decode, self.device, self.model)
        if wanted and batching.mode == "off":
            wanted, note = (
                False,
                "static path off: it serves a lone request of the running batch (batching off)",
            )
        eager = DecodeStatus("eager", self.device.type, note=note)
        if not wanted:
            return None, eager
        limits = (self.context_length, self.vocab_size)
        return StaticDecoder(self.model, self.forwarder, config or StaticConfig(), *limits), eager

    # --- sequences ------------------------------------------------------------------------

    def prefill(
        self, ids: Sequence[int], *, key: str | None = None, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        if key is None:  # a one-off forward: nothing kept afterwards
            one_off = CacheEntry(new_cache(self.config))
            return run_to_end(self._advance(one_off, list(ids), last, control, "one-off"))[0]
        self.release(key)
        return self.sync(key, ids, last=last, control=control)

    def extend(
        self, key: str, new_ids: Sequence[int], *, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        entry = self.kv_store.peek(key)
        if entry is None:
            raise PlaygroundError(
                "No sequence {sequence!r} in the engine (never started, or evicted): use sync.",
                key="engine.error.no_sequence",
                sequence=key,
            )
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
                entry, target, last, control, self._piece, lambda: new_cache(self.config), rest
            )
        )

    def _piece(self, cache: Any, ids: Sequence[int], keep: int) -> torch.Tensor:
        """One forward of ids with the cache (inside a forwarder turn); float32 scores (keep, vocab)."""
        return sequence_logits(self.model, cache, list(ids), keep)

    # --- beams (engine/beams.py: the one beam path) ----------------------------------------------

    def beam_start(
        self, ids: Sequence[int], num_beams: int, control: Control | None = None
    ) -> tuple[BeamRows, torch.Tensor]:
        """num_beams copies of ids: the prompt read once (in the running batch when batching), its
        cache repeated to the rows; scores (N, vocab)."""
        entry, n = CacheEntry(new_cache(self.config)), int(num_beams)
        rows, _ = run_to_end(self._advance(entry, list(ids), 1, control, "beam", ahead=True))
        with self.forwarder.memory_guard(), holding(self.lock, control):
            repeat_rows(entry, n)
        return BeamRows(entry, n, len(ids), control), rows[-1:].expand(n, -1).clone()

    def beam_step(self, batch: BeamRows, reorder: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        """Rows reordered (row i <- reorder[i]), then one token each; scores (N, vocab)."""
        check_room(batch.length + 1, self.context_length)
        if self.batcher is not None:  # one job of N rows in the running batch
            with self.forwarder.memory_guard(), holding(self.lock, batch.control):
                reorder_rows(batch, reorder)
            tokens = token_ids.reshape(-1).tolist()
            scores = self.batcher.forward_rows(batch.entry, tokens, batch.length, batch.control, "beam step")
        else:

            def step() -> torch.Tensor:
                reorder_rows(batch, reorder)
                return run_model(self.model, rows_inputs(batch, token_ids)).logits[:, -1].float()

            scores = self.forwarder.run(step, batch.control, wait=False)[0]  # (N, vocab)
        batch.length += 1
        return scores

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
                "Scoring starts at token {start} of {length}: it needs 1 <= start < length.",
                key="engine.error.score_start",
                start=start,
                length=len(ids),
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
        """Batching off: the one decode step (engine/decode_step.py) and one forward per token."""
        decoding = Decoding.start(plan, self.eos_token_ids, self.context_length, self.device)
        row = logits[-1]
        while True:
            record = decode_step(self.tokenizer, decoding, row, entry.ids, spent)
            yield record
            if finished(decoding, record):
                return
            check_room(len(entry.ids) + 1, self.context_length)
            rows, spent = yield from self.forwarder.chunks(
                entry, [record.id], 1, control, self._piece, wait=False
            )
            row = rows[-1]
            entry.remember(len(entry.ids), row)

    def measure_cache(self, seq_len: int, batch_size: int = 1, seed: int = 0) -> tuple[list[int], str]:
        """Fill a real KV cache with a forward over (batch, seq_len) synthetic ids; returns the bytes
        each layer's keys and values hold, and their dtype."""
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, self.vocab_size, (batch_size, seq_len), generator=generator).to(self.device)
        cache = new_cache(self.config)
        if self.batcher is not None and batch_size == 1:  # one sequence: it joins the running batch
            run_to_end(self.batcher.forward(CacheEntry(cache), ids[0].tolist(), 1, None, "KV measure"))
        else:
            self.forwarder.run(lambda: run_model(self.model, ModelInputs(ids, cache=cache)))
        tensors = (getattr(layer, "keys", None) for layer in cache.layers)
        dtype = next((str(keys.dtype) for keys in tensors if keys is not None), str(self.dtype))
        return filled_layer_bytes(cache), dtype.removeprefix("torch.")

    # --- warm-up --------------------------------------------------------------------------------

    def weights_changed(self) -> None:
        """The model's layers were replaced in place (--quantize): the twins are made again from them,
        and the running batch runs the new one."""
        self.twins = Twins(self.model)
        if self.batcher is not None:
            self.batcher.model = self.twins.ragged()

    def close(self) -> None:
        """Free what this engine holds beside its weights (unloaded by the model registry): every kept
        KV cache, the twins, the running batch's thread once idle."""
        for key in list(self.kv_store.keys()):
            self.kv_store.drop(key)
        self.twins = Twins(self.model)
        if self.batcher is not None:
            self.batcher.close()

    def synchronize(self) -> None:
        """Wait for the model's queued device work."""
        self.forwarder.synchronize()

    def warm_up(self, report: ProgressFn | None = None) -> None:
        """Chat, step and beam once each on a short input (engine/warmup.py warm_up)."""
        warm_up(self, report)
