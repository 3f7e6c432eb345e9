"""The loading step that readies decoding: the static path's slots and graphs, then a warm-up.

On CUDA the engine runs chat, step and beam once (`LocalEngine.warm_up`, through its own API), so
library handles, kernels and allocator pools load at start and not on a user's first request. On
ZeroGPU the GPU exists only inside a request, so the first request does it. Never raises: a
failure turns the static path off with the reason in the status line.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from playground.engine.static import DecodeStatus, ProgressFn, StaticDecoder, zero_gpu

if TYPE_CHECKING:
    from playground.engine.local import LocalEngine


def prepare_decode(
    engine: LocalEngine, decoder: StaticDecoder | None, progress: ProgressFn | None
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
                decoder.disable("warming up", exc)
            else:
                engine.decode_status.note = f"warm-up failed ({type(exc).__name__}: {exc})"[:200]
    status = engine.decode_status
    status.warmup_seconds = time.perf_counter() - started
    status.held_bytes = int(torch.cuda.memory_reserved(engine.device)) if cuda else status.held_bytes
    report(status.line())
    return status


def _quiet(message: str) -> None:
    """A progress function that says nothing."""
