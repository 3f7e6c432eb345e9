"""A serving engine's own KV figures next to the calculator's prediction for the served config.

vLLM reports its KV pool as blocks x block size (`vllm:cache_config_info`), SGLang as
`max_total_num_tokens`, llama-server as its context; the calculator says how many bytes that many
tokens take for the served model's config in the engine's cache dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playground.kv.bytes import kv_cache_bytes
from playground.kv.dtypes import KV_DTYPES
from playground.messages import Message

# Engine names of cache dtypes -> the calculator's.
ENGINE_DTYPES = {
    "f16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "f32": "float32",
    "float32": "float32",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_inc": "fp8",
    "q8_0": "q8_0",
    "q4_0": "q4_0",
}


@dataclass(frozen=True)
class ServerKVComparison:
    """The engine's KV capacity and usage, and what the calculator predicts for that many tokens."""

    capacity_tokens: int
    used_tokens: int | None
    usage: float | None  # 0..1
    block_size: int | None
    num_blocks: int | None
    dtype: str  # the calculator's name of the cache dtype used for the prediction
    dtype_note: str  # how that dtype was chosen (a Message)
    bytes_per_token: int  # all layers, keys and values, one sequence
    predicted_bytes: int  # capacity_tokens x bytes_per_token
    reported_bytes: int | None  # the engine's own pool bytes (vLLM, per GPU), when it says
    source: str


def cache_dtype(engine_dtype: str | None, config: Any) -> tuple[str, str]:
    """The calculator's dtype for an engine's cache dtype; "auto"/unknown: the model's own dtype."""
    name = (engine_dtype or "auto").lower()
    if name in ENGINE_DTYPES:
        return ENGINE_DTYPES[name], Message(
            "kv.server.engine_dtype", "the engine's cache dtype {dtype}", dtype=engine_dtype
        )
    model = str(_get(config, "dtype") or _get(config, "torch_dtype") or "").removeprefix("torch.")
    asked = engine_dtype or "auto"
    if model in KV_DTYPES:
        return model, Message(
            "kv.server.model_dtype",
            "cache dtype {asked} = the model's dtype {model}",
            asked=asked,
            model=model,
        )
    return "bfloat16", Message(
        "kv.server.assumed",
        "cache dtype {asked}; the model's dtype is unknown here, bfloat16 assumed",
        asked=asked,
    )


def compare_server_kv(figures: Any, config: Any) -> ServerKVComparison:
    """figures: a ServerKV from RemoteEngine.kv_figures(); config: the served model's config."""
    dtype, note = cache_dtype(figures.cache_dtype, config)
    per_token = kv_cache_bytes(config, 1, 1, dtype, "ideal")
    predicted = kv_cache_bytes(config, figures.capacity_tokens, 1, dtype, "ideal")
    return ServerKVComparison(
        figures.capacity_tokens,
        figures.used_tokens,
        figures.usage,
        figures.block_size,
        figures.num_blocks,
        dtype,
        note,
        per_token,
        predicted,
        figures.memory_bytes,
        figures.source,
    )


def _get(config: Any, key: str) -> Any:
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)
