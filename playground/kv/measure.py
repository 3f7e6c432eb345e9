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


@dataclass(frozen=True)
class QuantizedMeasurement:
    """A real QuantizedCache (fp8/int8/int4/int2) next to the calculator's bytes for what it holds:
    its quantized tokens in that format (scales in the model's dtype), its residual window in the
    model's dtype."""

    seq_len: int
    dtype: str  # the KV format ("int4")
    model_dtype: str
    quantized_tokens: int
    residual_tokens: int
    measured_layers: tuple[int, ...]
    predicted_layers: tuple[int, ...]

    @property
    def measured_bytes(self) -> int:
        return sum(self.measured_layers)

    @property
    def predicted_bytes(self) -> int:
        return sum(self.predicted_layers)

    @property
    def equal(self) -> bool:
        return self.measured_layers == self.predicted_layers


def quantized_prediction(
    config: Any, dtype: str, quantized: int, residual: int, model_dtype: str
) -> list[int]:
    """Per-layer bytes of a QuantizedCache holding `quantized` tokens in dtype and `residual` in the
    model's dtype (batch 1, "transformers" mode)."""
    parts = []
    if quantized:
        parts.append(kv_cache_breakdown(config, quantized, 1, dtype, "transformers", scale_dtype=model_dtype))
    if residual:
        parts.append(kv_cache_breakdown(config, residual, 1, model_dtype, "transformers"))
    if not parts:
        return [0] * len(kv_cache_breakdown(config, 1, 1, dtype, "transformers").layers)
    return [sum(layer.bytes for layer in group) for group in zip(*(p.layers for p in parts), strict=True)]


def measure_quantized_vs_predicted(engine: Any, dtype: str, seq_len: int) -> QuantizedMeasurement:
    """Have the engine fill a real quantized cache over seq_len synthetic tokens; its bytes next to
    the formula at that dtype, scales included."""
    from playground.engine.kv_quant import measure_quantized

    seq, _ = check_lengths(seq_len, 1)
    held = measure_quantized(engine, dtype, seq)
    model_dtype = str(engine.dtype).removeprefix("torch.")
    predicted = quantized_prediction(
        engine.config, dtype, held.quantized_tokens, held.residual_tokens, model_dtype
    )
    return QuantizedMeasurement(
        seq, dtype, model_dtype, held.quantized_tokens, held.residual_tokens, held.layers, tuple(predicted)
    )
