"""The static decode path: preallocated KV slots, one-token steps replayed as CUDA graphs.

The eager path (engine/local.py) runs every token as a fresh forward over a growing cache; on a
GPU a small model then spends its time in Python and kernel launches. This path keeps each
sequence's keys and values in a preallocated slot (engine/slots.py) and, on CUDA, records the
one-token step for every (batch rows, attention-length bucket) as a CUDA graph while the model
loads, so a decode step is one graph replay with no allocation and nothing compiled in use.

- Sequences (chat answers, step sessions): `slots` single-row slots of `capacity` tokens. A
  sequence lives in a slot while it is used; when another needs the slot, the least recently
  used one is parked (its filled rows copied out) and copied back on its next step. A sequence
  longer than the capacity moves to a transformers DynamicCache and continues eagerly.
- Undo is a crop: the length moves back, nothing is copied. A fork copies the filled rows.
- Beams: one slot of `beam_rows` rows; a beam step reorders its rows in place, then replays the
  graph for the batch size padded up to a power of two. A second concurrent search, or one
  longer than the beam capacity, runs on the eager path.
- Prompts (more than one token) run eagerly on the slot, a chunk at a time, with the same mask.

Before it is used, the path is checked against the eager path on a short input; a failure to
allocate, capture or agree turns it off (decoding stays eager) with the reason in the status
line, never an error. On ZeroGPU the GPU exists only inside a request: the first request warms up.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import get_layer_types_and_kwargs

from playground.engine.cache import copy_cache, new_cache, storage_bytes
from playground.engine.forward import Forwarder, eager_logits, keep_rows
from playground.engine.slots import KVShape, Slot, bucket_lengths
from playground.errors import PlaygroundError

DECODE_MODES = ("auto", "static", "eager")
ZERO_GPU_NOTE = "warms up on the first request (ZeroGPU: the GPU exists only inside a request)"
MIB = 1024 * 1024
# Largest difference the load-time check accepts between the static and the eager path: in
# probability, and in logits relative to their largest magnitude (kernels differ slightly).
CHECK_TOLERANCE = {torch.float32: (1e-4, 1e-3), "half": (0.05, 0.1)}

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class StaticConfig:
    """Sizes of the static path (PLAYGROUND_STATIC_TOKENS / PLAYGROUND_STATIC_SLOTS set the first two)."""

    capacity: int = 8192  # tokens per sequence slot (capped at the model's context)
    # sequences held in slots at once (default: model_concurrency 2, plus 1); others are parked in
    # plain memory. Each slot is allocated at full capacity: capacity x KV bytes per token.
    slots: int = 3
    beam_rows: int = 16  # beams one batched step can hold (the beam tab's most)
    beam_capacity: int = 1024  # tokens per beam row (prompt + steps); longer searches run eagerly
    min_bucket: int = 256  # shortest attention length a step graph reads
    graphs: bool = True  # capture CUDA graphs on CUDA (False: static cache, eager steps)

    def __post_init__(self) -> None:
        for name in ("capacity", "slots", "beam_capacity", "min_bucket"):
            if int(getattr(self, name)) < 1:
                raise PlaygroundError(f"Static decode: {name} must be >= 1, got {getattr(self, name)}")
        if self.beam_rows < 0:
            raise PlaygroundError(f"Static decode: beam_rows must be >= 0, got {self.beam_rows}")


@dataclass
class DecodeStatus:
    """How tokens are decoded, for the header: path, warm-up time, GPU memory held, and why."""

    path: str  # "eager" or "static"
    device: str  # "cuda", "cpu", ...
    graphs: int = 0  # captured CUDA graphs
    lengths: tuple[int, ...] = ()  # attention-length buckets
    warmup_seconds: float | None = None
    held_bytes: int | None = None  # GPU memory this process holds (weights, caches, graphs)
    static_bytes: int | None = None  # of which the static caches and graphs
    note: str = ""  # why eager, or when the warm-up happens

    def line(self) -> str:
        """One short line: 'Decode: static KV cache + CUDA graphs (30 graphs, 256–8192 tokens) · …'."""
        if self.path == "static":
            kind = "static KV cache + CUDA graphs" if self.graphs else "static KV cache, eager steps"
            span = f"{self.lengths[0]}–{self.lengths[-1]} tokens" if self.lengths else ""
            detail = ", ".join(p for p in (f"{self.graphs} graphs" if self.graphs else "", span) if p)
            parts = [f"Decode: {kind}" + (f" ({detail})" if detail else "")]
        else:
            parts = ["Decode: eager (dynamic KV cache)"]
        if self.warmup_seconds is not None:
            parts.append(f"warm-up {self.warmup_seconds:.1f} s")
        if self.held_bytes is not None:
            static = ""
            if self.static_bytes:
                static = f", static caches and graphs {self.static_bytes / MIB:,.0f} MiB"
            parts.append(f"GPU memory held {self.held_bytes / MIB:,.0f} MiB{static}")
        if self.note:
            parts.append(self.note)
        return " · ".join(parts)


def zero_gpu() -> bool:
    """True on a ZeroGPU Space (the `spaces` package and SPACES_ZERO_GPU set)."""
    flag = os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "true", "yes", "on")
    return flag and importlib.util.find_spec("spaces") is not None


def unsupported_reason(model: Any) -> str | None:
    """Why the static path cannot run this model (None: it can)."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder models are not supported"
    attention = getattr(config, "_attn_implementation", None)
    if attention not in ("sdpa", "eager"):
        return f"attention implementation {attention!r} (needs sdpa or eager)"
    devices = set(getattr(model, "hf_device_map", {}).values())
    if len(devices) > 1:
        return f"the model is spread over {len(devices)} devices"
    layer_types, _ = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    other = sorted(set(layer_types) - {"full_attention"})
    if other:
        return f"layers of type {', '.join(other)} (only full attention is supported)"
    wanted = {"input_ids", "position_ids", "attention_mask", "past_key_values"}
    if not wanted <= set(inspect.signature(model.forward).parameters):
        return "the model's forward does not take position ids, a 4D mask and a cache"
    return None


def static_wanted(decode: str, device: torch.device, model: Any) -> tuple[bool, str]:
    """(use the static path, a note when not): auto = static on CUDA, eager elsewhere."""
    if decode not in DECODE_MODES:
        raise PlaygroundError(f"Unknown decode path {decode!r}: use one of {', '.join(DECODE_MODES)}.")
    if decode == "eager":
        return False, "static path off (--no-compile)" if device.type == "cuda" else ""
    if decode == "auto" and device.type != "cuda":
        return False, ""
    reason = unsupported_reason(model)
    return (False, f"static path unavailable: {reason}") if reason else (True, "")


def _reserved(device: torch.device) -> int:
    return int(torch.cuda.memory_reserved(device)) if device.type == "cuda" else 0


class StaticSequence:
    """One sequence's keys and values on the static path (what CacheEntry.cache holds): in a slot,
    parked in plain tensors, or past the slots' capacity in a DynamicCache run eagerly."""

    # Another sequence's step can park this one (copy its rows out of the slot) while its entry sits
    # in the KV store: the store measures it again whenever it counts (engine/kv_store.py).
    resized_in_store = True

    def __init__(self, decoder: StaticDecoder) -> None:
        self.decoder = decoder
        self.length = 0  # tokens covered
        self.slot: Slot | None = None
        self.parked: tuple[torch.Tensor, torch.Tensor] | None = None  # (layers, 1, kv_heads, length, dim)
        self.dynamic: Any = None  # a DynamicCache once the sequence outgrew the slots

    @property
    def resident(self) -> bool:
        return self.slot is not None and self.slot.holder() is self

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last tokens (a negative count, as transformers 5 takes it): no copy."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative number of tokens to remove, got {tokens_to_remove}")
        with self.decoder.lock:
            self.length = max(0, self.length + tokens_to_remove)
            if self.dynamic is not None:
                self.dynamic.crop(self.length - self.dynamic.get_seq_length())

    def fork(self) -> StaticSequence:
        """An independent copy: the filled rows are copied, nothing is shared."""
        return self.decoder.fork(self)

    def release(self) -> None:
        """Give the slot back and drop every copy now (out of memory: the request is over)."""
        with self.decoder.lock:
            if self.resident:
                self.slot.owner = None  # type: ignore[union-attr]
            self.slot, self.parked, self.dynamic, self.length = None, None, None, 0

    def storage_bytes(self) -> int:
        """Memory held beyond the preallocated slots (a parked copy or a dynamic cache). Read without
        the model lock (the KV store counts while others decode): each field is read once."""
        dynamic, parked = self.dynamic, self.parked
        if dynamic is not None:
            return storage_bytes(dynamic)
        if parked is not None:
            return sum(t.untyped_storage().nbytes() for t in parked)
        return 0


class StaticBeams:
    """A beam batch's rows in the beam slot (what BeamBatch.cache holds on the static path)."""

    def __init__(self, slot: Slot, rows: int) -> None:
        self.slot, self.rows, self.length = slot, rows, 0

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        """Row i becomes old row beam_idx[i], in place in the slot (two copies for all layers)."""
        if self.length:
            index = beam_idx.to(self.slot.device)
            for buffer in self.slot.rows_of(0, self.rows, self.length):
                buffer.copy_(buffer.index_select(1, index))

    def to_dynamic(self, config: Any) -> Any:
        """The same rows in a DynamicCache (the search outgrew the beam slot); frees the slot."""
        cache = new_cache(config)
        if self.length:
            keys, values = self.slot.rows_of(0, self.rows, self.length)
            for layer in range(keys.shape[0]):
                cache.update(keys[layer], values[layer], layer)
        self.slot.owner = None
        return cache


class StaticDecoder:
    """The static path of one engine: its slots, graphs and sequences (see the module docstring).
    Every method runs under the engine's model lock (an RLock), so slots change hands atomically."""

    def __init__(
        self, model: Any, forwarder: Forwarder, config: StaticConfig, context_length: int, vocab: int
    ) -> None:
        self.model, self.forwarder = model, forwarder
        self.device, self.lock = forwarder.device, forwarder.lock
        self.config, self.vocab = config, vocab
        self.capacity = min(int(config.capacity), int(context_length))
        self.beam_capacity = min(int(config.beam_capacity), self.capacity)
        self.buckets = bucket_lengths(self.capacity, min(config.min_bucket, self.capacity))
        self.beam_buckets = bucket_lengths(self.beam_capacity, min(config.min_bucket, self.beam_capacity))
        self.graphs_wanted = bool(config.graphs) and self.device.type == "cuda"
        self._additive = getattr(model.config, "_attn_implementation", "sdpa") == "eager"
        self.slots: list[Slot] = []
        self.beam_slot: Slot | None = None
        self.state = "cold"  # cold -> ready, or failed (decode eagerly)
        self._clock = 0
        note = ZERO_GPU_NOTE if self.device.type == "cuda" and zero_gpu() else "not warmed up yet"
        self.status = DecodeStatus("static", self.device.type, lengths=self.buckets, note=note)

    # --- readiness ----------------------------------------------------------------------------

    def usable(self) -> bool:
        """True when the static path is ready (warming it up now if it never was)."""
        if self.state == "cold":
            self.prepare()
        return self.state == "ready"

    def prepare(self, report: ProgressFn | None = None) -> bool:
        """Allocate the slots, capture the graphs (CUDA) and check against eager. False: it failed,
        the path is off and the status says why (decoding stays eager). One forwarder turn."""
        return self.forwarder.run(lambda: self._prepare(report or _quiet))[0]

    def _prepare(self, report: ProgressFn) -> bool:
        with self.lock:
            if self.state != "cold":
                return self.state == "ready"
            started, before = time.perf_counter(), _reserved(self.device)
            stage = "allocating the static caches"
            try:
                self._allocate()
                if self.graphs_wanted:
                    stage = "capturing CUDA graphs"
                    self._capture_all(report)
                stage = "checking the static path against eager"
                self.state = "ready"  # the check runs the path as requests will
                self._check()
            except Exception as exc:  # any failure here means: decode eagerly, never crash
                self.disable(stage, exc)
                return False
            self._ready_status(time.perf_counter() - started, before)
            return True

    def disable(self, stage: str, exc: BaseException) -> None:
        """Turn the path off (decode eagerly) and free its memory; the status says why."""
        self.slots, self.beam_slot, self.state = [], None, "failed"
        message = " ".join(str(exc).split())[:200]
        note = f"static path off: {stage} failed ({type(exc).__name__}{': ' + message if message else ''})"
        self.status = DecodeStatus("eager", self.device.type, note=note)
        if self.device.type == "cuda":
            try:
                torch.cuda.synchronize(self.device)
                torch.cuda.empty_cache()
            except RuntimeError:
                pass  # a broken capture may leave an error behind; eager decoding reports its own

    def _allocate(self) -> None:
        shape = KVShape.of(self.model, self.device)
        made = dict(buckets=self.buckets, additive_mask=self._additive)
        self.slots = [Slot(shape, 1, self.capacity, self.vocab, **made) for _ in range(self.config.slots)]
        if self.config.beam_rows:
            beam = dict(buckets=self.beam_buckets, additive_mask=self._additive)
            self.beam_slot = Slot(shape, self.config.beam_rows, self.beam_capacity, self.vocab, **beam)

    def _all_slots(self) -> list[Slot]:
        return [*self.slots, *([self.beam_slot] if self.beam_slot is not None else [])]

    def _capture_all(self, report: ProgressFn) -> None:
        """One graph per (slot, rows, bucket), all from one memory pool (they never run at once)."""
        pool = torch.cuda.graph_pool_handle() if self.device.type == "cuda" else None
        jobs = [(slot, rows, bucket) for slot in self._all_slots() for rows, bucket in slot.graph_jobs()]
        for done, (slot, rows, bucket) in enumerate(jobs, start=1):
            slot.capture(self._call, rows, bucket, pool)
            if done == len(jobs) or done % 8 == 0:
                report(f"Capturing CUDA graphs: {done}/{len(jobs)}")
        torch.cuda.synchronize(self.device)

    def _ready_status(self, seconds: float, before: int) -> None:
        slots = self._all_slots()
        cuda = self.device.type == "cuda"
        static = _reserved(self.device) - before if cuda else sum(slot.nbytes() for slot in slots)
        self.status = DecodeStatus(
            "static",
            self.device.type,
            graphs=sum(len(slot.graphs) for slot in slots),
            lengths=self.buckets,
            warmup_seconds=seconds,
            held_bytes=_reserved(self.device) if cuda else None,
            static_bytes=static,
            note="warmed up on the first request (ZeroGPU)" if cuda and zero_gpu() else "",
        )

    def _check(self) -> None:
        """Run a short input through the static path (one sequence, then 3 beams whose rows are
        reordered) and through eager; raise if any distribution differs beyond the tolerance."""
        ids = torch.randint(0, self.vocab, (20,), generator=torch.Generator().manual_seed(0)).tolist()
        prompt, steps = ids[:14], ids[14:]
        reference = new_cache(self.model.config)
        expected = [eager_logits(self.model, reference, prompt, 1)[-1]]
        expected += [eager_logits(self.model, reference, [token], 1)[-1] for token in steps]
        sequence = self.new_sequence()
        got = [self.forward(sequence, prompt, 1)[-1]] + [self.forward(sequence, [t], 1)[-1] for t in steps]
        for row, want in zip(got, expected, strict=True):
            self._agree(row, want)
        beams = self.new_beams(3)
        if beams is None:
            return
        rows = self.beam_forward(beams, torch.tensor([prompt] * 3, device=self.device), 0)
        for step, token in enumerate([*steps, None]):
            for row in rows:
                self._agree(row, expected[step])
            if token is not None:
                beams.reorder_cache(torch.tensor([2, 0, 1]))
                tokens = torch.tensor([[token]] * 3, device=self.device)
                rows = self.beam_forward(beams, tokens, len(prompt) + step)

    def _agree(self, got: torch.Tensor, want: torch.Tensor) -> None:
        dtype = self.model.get_input_embeddings().weight.dtype
        max_prob, max_logit = CHECK_TOLERANCE.get(dtype, CHECK_TOLERANCE["half"])
        prob = float((got.float().softmax(-1) - want.float().softmax(-1)).abs().max())
        logit = float((got - want).abs().max() / want.abs().max().clamp_min(1e-6))
        if prob > max_prob or logit > max_logit:
            raise RuntimeError(
                f"the static path disagrees with eager by {prob:.2g} in probability and {logit:.2g} "
                "in logits (relative)"
            )

    def _call(
        self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any, keep: int
    ) -> torch.Tensor:
        """The model's forward on a slot: logits (rows, q or keep, vocab) in the model's dtype."""
        out = self.model(
            input_ids=ids,
            position_ids=positions,
            attention_mask=mask,
            past_key_values=cache,
            use_cache=True,
            **keep_rows(self.model, keep),
        )
        return out.logits

    # --- sequences ------------------------------------------------------------------------------

    def new_sequence(self) -> StaticSequence:
        return StaticSequence(self)

    @torch.inference_mode()
    def forward(self, sequence: StaticSequence, ids: Sequence[int], last: int) -> torch.Tensor:
        """Append ids to the sequence; float32 scores (last, vocab) after its last `last` ids. One
        token: the step graph of its slot; more: an eager chunk on the slot; past the capacity: eager.
        Runs inside a forwarder turn (the engine's chunked forward)."""
        with self.lock:
            total = sequence.length + len(ids)
            if sequence.dynamic is not None or total > self.capacity or self.state != "ready":
                self._to_dynamic(sequence)
                rows = eager_logits(self.model, sequence.dynamic, ids, last)
            else:
                slot = self._resident(sequence)
                if len(ids) == 1:
                    rows = slot.step(self._call, int(ids[0]), sequence.length, 1)
                else:
                    chunk = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
                    rows = slot.chunk(self._call, chunk, sequence.length, last)[0]
            sequence.length = total
            return rows

    @torch.inference_mode()
    def fork(self, sequence: StaticSequence) -> StaticSequence:
        """A copy of the sequence's filled rows, parked until its first step."""
        with self.lock:
            twin = self.new_sequence()
            twin.length = sequence.length
            if sequence.dynamic is not None:
                twin.dynamic = copy_cache(sequence.dynamic)
            elif sequence.length:
                keys, values = self._filled(sequence)
                twin.parked = (keys.clone(), values.clone())
            return twin

    def _filled(self, sequence: StaticSequence) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's filled rows (layers, 1, kv_heads, length, dim), wherever they are."""
        if sequence.resident:
            return sequence.slot.rows_of(0, 1, sequence.length)  # type: ignore[union-attr]
        if sequence.parked is None:
            raise RuntimeError("a static sequence lost its cache")
        keys, values = sequence.parked
        return keys[:, :, :, : sequence.length], values[:, :, :, : sequence.length]

    def _resident(self, sequence: StaticSequence) -> Slot:
        """The sequence's slot: a free one, or the least recently used one (its holder is parked)."""
        self._clock += 1
        if not sequence.resident:
            slot = min(self.slots, key=lambda s: (s.holder() is not None, s.used))
            holder = slot.holder()
            if holder is not None:
                parked = tuple(t.clone() for t in self._filled(holder)) if holder.length else None
                holder.parked, holder.slot = parked, None
            if sequence.length:
                targets = slot.rows_of(0, 1, sequence.length)
                for target, source in zip(targets, self._filled(sequence), strict=True):
                    target.copy_(source)
            sequence.parked, sequence.slot = None, slot
            slot.owner = weakref.ref(sequence)
        sequence.slot.used = self._clock  # type: ignore[union-attr]
        return sequence.slot  # type: ignore[return-value]

    def _to_dynamic(self, sequence: StaticSequence) -> None:
        """Move the sequence into a DynamicCache (it outgrew the slots, or the path is off)."""
        if sequence.dynamic is not None:
            return
        cache = new_cache(self.model.config)
        if sequence.length:
            keys, values = self._filled(sequence)
            for layer in range(keys.shape[0]):
                cache.update(keys[layer], values[layer], layer)
        if sequence.resident:
            sequence.slot.owner = None  # type: ignore[union-attr]
        sequence.dynamic, sequence.slot, sequence.parked = cache, None, None

    # --- beams ------------------------------------------------------------------------------------

    def new_beams(self, rows: int) -> StaticBeams | None:
        """The beam slot for `rows` beams, or None when it is busy or too small (run eagerly)."""
        with self.lock:
            slot = self.beam_slot
            if self.state != "ready" or slot is None or rows > slot.rows or slot.holder() is not None:
                return None
            beams = StaticBeams(slot, rows)
            slot.owner = weakref.ref(beams)
            return beams

    def beam_fits(self, beams: StaticBeams, total: int) -> bool:
        return self.state == "ready" and total <= beams.slot.capacity

    @torch.inference_mode()
    def beam_forward(self, beams: StaticBeams, input_ids: torch.Tensor, start: int) -> torch.Tensor:
        """input_ids (rows, q) at positions start..; float32 scores (rows, vocab) after the last."""
        with self.lock:
            if input_ids.shape[1] == 1:
                rows = beams.slot.step(self._call, input_ids[:, 0], start, beams.rows)
            else:
                rows = beams.slot.chunk(self._call, input_ids.contiguous(), start, 1)[:, -1]
            beams.length = start + input_ids.shape[1]
            return rows


def _quiet(message: str) -> None:
    """A progress function that says nothing."""
