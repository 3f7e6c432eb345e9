"""The static decode path: one preallocated KV slot whose one-token step replays as a CUDA graph.

On a GPU a small model spends an eager decode step in Python and kernel launches. This path keeps one
sequence's keys and values in a slot allocated once (engine/slots.py) and, on CUDA, records the
one-token step for every attention-length bucket as a CUDA graph while the model loads, so a step
is one graph replay with no allocation and nothing compiled in use.

It is the running batch's solo path (engine/batcher.py `SoloPath`): when one job is alone in the batch
and takes one token (a chat stream decoding, a step's pick), its token runs here; as soon as a second
job is there, both are batched. The slot mirrors the lone job's cache: the job's prefix is copied in
when it goes solo, the tokens made here are copied back into its own cache when it leaves or is
batched again, so the batch, the KV store and every other reader see a plain cache. A sequence longer
than the slot, or a model with other layers than full attention, stays on the batched path.

Before it is used, the path is checked against eager on a short input (steps and the copy back); a
failure to allocate, capture or agree turns it off with the reason in the status line, never an
error. On ZeroGPU the GPU exists only inside a request: the first request warms up.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from playground.engine.cache import GrowableLayer, new_cache
from playground.engine.forward import Forwarder
from playground.engine.kv_store import CacheEntry
from playground.engine.model_call import ModelInputs, run_model, sequence_logits
from playground.engine.ragged import full_attention_reason
from playground.engine.slots import KVShape, Slot, bucket_lengths
from playground.errors import PlaygroundError
from playground.messages import Message

DECODE_MODES = ("auto", "static", "eager")
ZERO_GPU_NOTE = Message(
    "decode.note.zero_gpu", "warms up on the first request (ZeroGPU: the GPU exists only inside a request)"
)
MIB = 1024 * 1024
# Largest difference the load-time check accepts between the static and the eager path: in
# probability, and in logits relative to their largest magnitude (kernels differ slightly).
CHECK_TOLERANCE = {torch.float32: (1e-4, 1e-3), "half": (0.05, 0.1)}

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class StaticConfig:
    """Sizes of the static path (PLAYGROUND_STATIC_TOKENS sets the capacity)."""

    capacity: int = 8192  # tokens the slot holds (capped at the model's context): capacity x KV bytes
    min_bucket: int = 256  # shortest attention length a step graph reads
    graphs: bool = True  # capture CUDA graphs on CUDA (False: static cache, eager steps)

    def __post_init__(self) -> None:
        for name in ("capacity", "min_bucket"):
            if int(getattr(self, name)) < 1:
                raise PlaygroundError(
                    "Static decode: {name} must be >= 1, got {value}",
                    key="decode.error.size",
                    name=name,
                    value=getattr(self, name),
                )


@dataclass
class DecodeStatus:
    """How tokens are decoded, for the header: path, warm-up time, GPU memory held, and why."""

    path: str  # "eager" or "static"
    device: str  # "cuda", "cpu", ...
    graphs: int = 0  # captured CUDA graphs
    lengths: tuple[int, ...] = ()  # attention-length buckets
    warmup_seconds: float | None = None
    held_bytes: int | None = None  # GPU memory this process holds (weights, caches, graphs)
    static_bytes: int | None = None  # of which the static cache and graphs
    note: str = ""  # why eager, or when the warm-up happens

    def line(self) -> str:
        """One short line: 'Decode: static KV cache + CUDA graphs (6 graphs, 256–8192 tokens) · …' (a
        Message: the header says it in the page's language)."""
        parts = [self._path_part()]
        if self.warmup_seconds is not None:
            parts.append(Message("decode.warmup", "warm-up {seconds:.1f} s", seconds=self.warmup_seconds))
        if self.held_bytes is not None:
            static = ""
            if self.static_bytes:
                static = Message(
                    "decode.static_bytes",
                    ", static cache and graphs {mib:,.0f} MiB",
                    mib=self.static_bytes / MIB,
                )
            parts.append(
                Message(
                    "decode.held",
                    "GPU memory held {mib:,.0f} MiB{static}",
                    mib=self.held_bytes / MIB,
                    static=static,
                )
            )
        if self.note:
            parts.append(self.note)
        return dotted(*parts)

    def _path_part(self) -> Message:
        if self.path != "static":
            return Message("decode.eager", "Decode: eager (dynamic KV cache)")
        kind = (
            Message("decode.kind.graphs", "static KV cache + CUDA graphs")
            if self.graphs
            else Message("decode.kind.eager_steps", "static KV cache, eager steps")
        )
        low, high = (self.lengths[0], self.lengths[-1]) if self.lengths else (0, 0)
        if self.graphs and self.lengths:
            detail = Message(
                "decode.detail.both",
                " ({graphs} graphs, {low}–{high} tokens)",
                graphs=self.graphs,
                low=low,
                high=high,
            )
        elif self.lengths:
            detail = Message("decode.detail.span", " ({low}–{high} tokens)", low=low, high=high)
        elif self.graphs:
            detail = Message("decode.detail.graphs", " ({graphs} graphs)", graphs=self.graphs)
        else:
            detail = ""
        return Message("decode.static", "Decode: {kind}{detail} for a lone request", kind=kind, detail=detail)


def dotted(*parts: str) -> str:
    """Header parts joined by " · ", as one Message (each part said in the page's language)."""
    joined = parts[0] if parts else ""
    for part in parts[1:]:
        joined = Message("decode.dot", "{before} · {after}", before=joined, after=part)
    return joined


def zero_gpu() -> bool:
    """True on a ZeroGPU Space (the `spaces` package and SPACES_ZERO_GPU set)."""
    flag = os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "true", "yes", "on")
    return flag and importlib.util.find_spec("spaces") is not None


def static_wanted(decode: str, device: torch.device, model: Any) -> tuple[bool, str]:
    """(use the static path, a note when not): auto = static on CUDA, eager elsewhere."""
    if decode not in DECODE_MODES:
        raise PlaygroundError(
            "Unknown decode path {decode!r}: use one of {modes}.",
            key="decode.error.unknown",
            decode=decode,
            modes=", ".join(DECODE_MODES),
        )
    if decode == "eager":
        off = Message("decode.note.no_compile", "static path off (--no-compile)")
        return False, off if device.type == "cuda" else ""
    if decode == "auto" and device.type != "cuda":
        return False, ""
    reason = full_attention_reason(model)
    unavailable = Message("decode.note.unavailable", "static path unavailable: {reason}", reason=reason)
    return (False, unavailable) if reason else (True, "")


def _reserved(device: torch.device) -> int:
    return int(torch.cuda.memory_reserved(device)) if device.type == "cuda" else 0


class StaticDecoder:
    """The static path of one engine: its slot, its graphs, and the lone job it mirrors (see the
    module docstring). Every method runs under the engine's model lock (an RLock)."""

    def __init__(
        self, model: Any, forwarder: Forwarder, config: StaticConfig, context_length: int, vocab: int
    ) -> None:
        self.model, self.forwarder = model, forwarder
        self.device, self.lock = forwarder.device, forwarder.lock
        self.config, self.vocab = config, vocab
        self.capacity = min(int(config.capacity), int(context_length))
        self.buckets = bucket_lengths(self.capacity, min(config.min_bucket, self.capacity))
        self.graphs_wanted = bool(config.graphs) and self.device.type == "cuda"
        self._additive = getattr(model.config, "_attn_implementation", "sdpa") == "eager"
        self.slot: Slot | None = None
        self.state = "cold"  # cold -> ready, or failed (decode eagerly)
        self._holder: CacheEntry | None = None  # the entry the slot mirrors
        self._holder_cache: Any = None  # its cache when it was copied in (a dropped cache is not it)
        self._filled = 0  # tokens of the holder in the slot
        self._synced = 0  # of which its own cache holds too
        self.steps = 0  # one-token steps run here (tests and the header count them)
        cold = Message("decode.note.cold", "not warmed up yet")
        note = ZERO_GPU_NOTE if self.device.type == "cuda" and zero_gpu() else cold
        self.status = DecodeStatus("static", self.device.type, lengths=self.buckets, note=note)

    # --- readiness ----------------------------------------------------------------------------

    def usable(self) -> bool:
        """True when the static path is ready (warming it up now if it never was)."""
        if self.state == "cold":
            self.prepare()
        return self.state == "ready"

    def prepare(self, report: ProgressFn | None = None) -> bool:
        """Allocate the slot, capture the graphs (CUDA) and check against eager. False: it failed, the
        path is off and the status says why (decoding stays eager). One forwarder turn."""
        return self.forwarder.run(lambda: self._prepare(report or _quiet))[0]

    def _prepare(self, report: ProgressFn) -> bool:
        with self.lock:
            if self.state != "cold":
                return self.state == "ready"
            started, before = time.perf_counter(), _reserved(self.device)
            stage = Message("decode.stage.allocating", "allocating the static cache")
            try:
                shape = KVShape.of(self.model, self.device)
                self.slot = Slot(
                    shape, 1, self.capacity, self.vocab, buckets=self.buckets, additive_mask=self._additive
                )
                if self.graphs_wanted:
                    stage = Message("decode.stage.capturing", "capturing CUDA graphs")
                    self._capture_all(report)
                stage = Message("decode.stage.checking", "checking the static path against eager")
                self.state = "ready"  # the check runs the path as requests will
                self._check()
            except Exception as exc:  # any failure here means: decode eagerly, never crash
                self.disable(stage, exc)
                return False
            self._ready_status(time.perf_counter() - started, before)
            return True

    def disable(self, stage: str, exc: BaseException) -> None:
        """Turn the path off (decode eagerly) and free its memory; the status says why."""
        self.slot, self.state, self._holder = None, "failed", None
        message = " ".join(str(exc).split())[:200]
        error = f"{type(exc).__name__}{': ' + message if message else ''}"
        note = Message(
            "decode.note.failed",
            "static path off: {stage} failed ({error})",
            stage=stage,
            error=error,
        )
        self.status = DecodeStatus("eager", self.device.type, note=note)
        if self.device.type == "cuda":
            try:
                torch.cuda.synchronize(self.device)
                torch.cuda.empty_cache()
            except RuntimeError:
                pass  # a broken capture may leave an error behind; eager decoding reports its own

    def _capture_all(self, report: ProgressFn) -> None:
        """One graph per bucket, all from one memory pool (they never run at once)."""
        assert self.slot is not None
        pool = torch.cuda.graph_pool_handle() if self.device.type == "cuda" else None
        jobs = self.slot.graph_jobs()
        for done, (rows, bucket) in enumerate(jobs, start=1):
            self.slot.capture(self._call, rows, bucket, pool)
            if done == len(jobs) or done % 8 == 0:
                report(f"Capturing CUDA graphs: {done}/{len(jobs)}")
        torch.cuda.synchronize(self.device)

    def _ready_status(self, seconds: float, before: int) -> None:
        assert self.slot is not None
        cuda = self.device.type == "cuda"
        self.status = DecodeStatus(
            "static",
            self.device.type,
            graphs=len(self.slot.graphs),
            lengths=self.buckets,
            warmup_seconds=seconds,
            held_bytes=_reserved(self.device) if cuda else None,
            static_bytes=_reserved(self.device) - before if cuda else self.slot.nbytes(),
            note=Message("decode.note.warmed", "warmed up on the first request (ZeroGPU)")
            if cuda and zero_gpu()
            else "",
        )

    def _check(self) -> None:
        """Run a short input through the static path and through eager: a prompt read eagerly, then
        one-token steps on the slot, then the copy back; raise if any distribution or the copied
        keys and values differ beyond the tolerance."""
        ids = torch.randint(0, self.vocab, (20,), generator=torch.Generator().manual_seed(0)).tolist()
        prompt, steps = ids[:14], ids[14:]
        reference = new_cache(self.model.config)
        sequence_logits(self.model, reference, prompt, 1)
        expected = [sequence_logits(self.model, reference, [token], 1)[-1] for token in steps]
        entry = CacheEntry(new_cache(self.model.config), list(prompt))
        sequence_logits(self.model, entry.cache, prompt, 1)
        for token, want in zip(steps, expected, strict=True):
            self._agree(self.step(entry, token)[-1], want)
            entry.ids.append(token)
        self.release(entry)
        for mine, theirs in zip(entry.cache.layers, reference.layers, strict=True):
            self._agree(mine.keys.flatten(), theirs.keys.flatten(), probabilities=False)

    def _agree(self, got: torch.Tensor, want: torch.Tensor, probabilities: bool = True) -> None:
        dtype = self.model.get_input_embeddings().weight.dtype
        max_prob, max_logit = CHECK_TOLERANCE.get(dtype, CHECK_TOLERANCE["half"])
        got, want = got.float(), want.float()
        prob = float((got.softmax(-1) - want.softmax(-1)).abs().max()) if probabilities else 0.0
        logit = float((got - want).abs().max() / want.abs().max().clamp_min(1e-6))
        if prob > max_prob or logit > max_logit:
            raise RuntimeError(
                f"the static path disagrees with eager by {prob:.2g} in probability and {logit:.2g} "
                "(relative)"
            )

    def _call(
        self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any, keep: int
    ) -> torch.Tensor:
        """The model's forward on the slot (the one model call): logits (rows, keep, vocab)."""
        return run_model(self.model, ModelInputs(ids, positions, cache, mask, keep)).logits

    # --- the solo path (engine/batcher.py SoloPath) ----------------------------------------------

    def takes(self, entry: CacheEntry) -> bool:
        """The entry's next token fits the slot and its cache is one plain full-attention sequence."""
        cache = entry.cache
        if cache is None or len(entry.ids) + 1 > self.capacity or not self.usable():
            return False
        layers = getattr(cache, "layers", [])
        return bool(layers) and all(
            isinstance(layer, GrowableLayer) and layer.is_initialized and layer.buffers[0].shape[0] == 1
            for layer in layers
        )

    @torch.inference_mode()
    def step(self, entry: CacheEntry, token_id: int) -> torch.Tensor:
        """Append token_id to the entry's sequence on the slot (a graph replay on CUDA); float32 scores
        (1, vocab). The entry's own cache lags behind until release."""
        with self.lock:
            if not (self._holder is entry and self._holder_cache is entry.cache):
                self._copy_in(entry)
            elif self._filled != len(entry.ids):
                raise RuntimeError("a static mirror lost track of its sequence's length")
            assert self.slot is not None
            rows = self.slot.step(self._call, int(token_id), self._filled, 1)
            self._filled += 1
            self.steps += 1
            return rows

    @torch.inference_mode()
    def release(self, entry: CacheEntry) -> None:
        """Copy the tokens made on the slot into the entry's own cache and stop mirroring it."""
        if self._holder is not entry:  # the common case, without the lock: nothing mirrored
            return
        with self.lock:
            if self._holder is not entry:
                return
            if self._holder_cache is entry.cache and self._filled > self._synced and self.slot is not None:
                first, last = self._synced, self._filled
                for index, layer in enumerate(entry.cache.layers):
                    keys = self.slot.keys[index, :1, :, first:last]
                    values = self.slot.values[index, :1, :, first:last]
                    layer.update(keys, values)
            self._holder, self._holder_cache = None, None

    def _copy_in(self, entry: CacheEntry) -> None:
        """Make the slot mirror this entry: its filled keys and values copied in."""
        if self._holder is not None:
            self.release(self._holder)
        assert self.slot is not None
        length = len(entry.ids)
        targets = self.slot.rows_of(0, 1, length)
        for index, layer in enumerate(entry.cache.layers):
            if layer.get_seq_length() != length:
                raise RuntimeError(f"a cache of {layer.get_seq_length()} tokens for {length} ids")
            targets[0][index].copy_(layer.keys)
            targets[1][index].copy_(layer.values)
        self._holder, self._holder_cache = entry, entry.cache
        self._filled = self._synced = length


def _quiet(message: str) -> None:
    """A progress function that says nothing."""
