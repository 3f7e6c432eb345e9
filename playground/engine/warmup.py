"""The loading step that readies decoding: the static path's slots and graphs, then a warm-up.

On CUDA the engine runs chat, step and beam once (`LocalEngine.warm_up`, through its own API), so
library handles, kernels and allocator pools load at start and not on a user's first request. On
ZeroGPU the GPU exists only inside a request, so the first request does it. Never raises: a
failure turns the static path off with the reason in the status line.
"""

from __future__ import annotations

import time
from typing import Protocol

import torch

from playground.engine.base import Engine
from playground.engine.plans import DecodePlan
from playground.engine.sampling import SamplingSettings
from playground.engine.static import DecodeStatus, ProgressFn, StaticDecoder, zero_gpu
from playground.messages import Message


class Warmable(Engine, Protocol):
    """An in-process engine: the Engine protocol plus its device, decode status and warm-up."""

    device: torch.device

    @property
    def decode_status(self) -> DecodeStatus: ...

    def warm_up(self, report: ProgressFn | None = None) -> None: ...

    def synchronize(self) -> None: ...


# The warm-up decodes once greedily and once with every sampling stage on.
WARM_UP_SETTINGS = (
    SamplingSettings(temperature=0),
    SamplingSettings(
        temperature=0.8, top_k=40, top_p=0.9, min_p=0.05, typical_p=0.95, repetition_penalty=1.1
    ),
)


def prepare_decode(
    engine: Warmable, decoder: StaticDecoder | None, progress: ProgressFn | None
) -> DecodeStatus:
    """Prepare the static path (when on), warm up on CUDA, and return the decode status."""
    report = progress or _quiet
    cuda = engine.device.type == "cuda"
    if (cuda and zero_gpu()) or (decoder is None and not cuda):
        return engine.decode_status  # ZeroGPU: the first request warms up; eager on a CPU: nothing to do
    started = time.perf_counter()
    if decoder is not None:
        report("Preparing the static decode path (KV slots, CUDA graphs, check against eager)...")
        decoder.prepare(report)
    if cuda:
        try:
            engine.warm_up(report)
        except Exception as exc:  # a warm-up failure must not stop the app
            if decoder is not None and decoder.state == "ready":
                decoder.disable(Message("decode.stage.warming", "warming up"), exc)
            else:
                engine.decode_status.note = Message(
                    "decode.note.warmup_failed",
                    "warm-up failed ({error})",
                    error=f"{type(exc).__name__}: {exc}"[:180],
                )
    status = engine.decode_status
    status.warmup_seconds = time.perf_counter() - started
    status.held_bytes = int(torch.cuda.memory_reserved(engine.device)) if cuda else status.held_bytes
    report(status.line())
    return status


def _quiet(message: str) -> None:
    """A progress function that says nothing."""


def warm_up(engine: Warmable, report: ProgressFn | None = None) -> None:
    """Run a chat stream (greedy and sampled), a step (sync, one more token, crop) and a beam step
    once each on a short input, so library handles, kernels and allocator pools load now and not on
    a user's first request."""
    if report is not None:
        report("Warming up: chat, step and beam once each")
    text = "Warm up the playground with one ordinary sentence about a lighthouse keeper and a storm. "
    ids = list(engine.tokenizer(text * 4, add_special_tokens=False).input_ids)[:48] or [0]
    for settings in WARM_UP_SETTINGS:
        for _ in engine.stream(ids, DecodePlan(settings, 4, seed=0)):
            pass
    key = "warm-up"
    engine.sync(key, ids)
    engine.sync(key, [*ids, ids[0]], last=2)
    engine.crop(key, len(ids))
    engine.release(key)
    batch, logits = engine.beam_start(ids[:16], 4)
    engine.beam_step(batch, torch.arange(4, device=logits.device), logits.argmax(dim=-1))
    engine.synchronize()
