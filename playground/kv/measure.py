"""Measured vs predicted: a real KV cache built by the engine, next to the calculator's bytes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playground.kv.bytes import KVBreakdown, check_lengths, kv_cache_breakdown


@dataclass(frozen=True)
class Measurement:
    """A real cache built by a forward pass next to the prediction for the same model and shape."""

    seq_len: int
    batch_size: int
    dtype: str
    measured_layers: tuple[int, ...]  # bytes per layer held by the real cache's keys and values
    predicted: KVBreakdown  # mode "transformers", the cache's own dtype

    @property
    def measured_bytes(self) -> int:
        return sum(self.measured_layers)

    @property
    def equal(self) -> bool:
        return self.measured_bytes == self.predicted.total_bytes


def measure_vs_predicted(engine: Any, seq_len: int, batch_size: int = 1) -> Measurement:
    """Have the engine fill a real cache over `seq_len` synthetic tokens and compare its bytes with
    the "transformers" prediction, in the dtype the cache really holds (the model's own)."""
    seq, batch = check_lengths(seq_len, batch_size)
    measured, dtype = engine.measure_cache(seq, batch)
    predicted = kv_cache_breakdown(engine.config, seq, batch, dtype=dtype, mode="transformers")
    return Measurement(seq, batch, dtype, tuple(measured), predicted)
