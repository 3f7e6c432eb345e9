"""KV-cache memory: exact bytes from a model config, per layer, what fits on a GPU, measured vs predicted.

Every attention layer caches, per sequence and per token, one key and one value vector per KV head:

    bytes = Σ_layers  batch × tokens_held(layer) × kv_heads × (row(k_dim) + row(v_dim))

where `row(n)` is the bytes of an n-element vector in the cache dtype (n × 2 for float16; llama.cpp's
q8_0/q4_0 add one float16 scale per block of 32). For a plain MHA/GQA/MQA model this is the familiar
2 (K and V) × layers × kv_heads × head_dim × tokens × batch × bytes-per-element.

Two modes:
- "ideal": what an efficient engine must hold. Sliding-window layers hold min(seq_len, window) tokens;
  MLA layers (DeepSeek-V2/V3) hold one latent of kv_lora_rank + qk_rope_head_dim per token.
- "transformers": what `transformers`' DynamicCache allocates for that model (checked against its source
  and real caches): sliding layers keep min(seq_len, window - 1) tokens, Falcon's new decoder
  architecture caches K/V already broadcast to every attention head, MLA caches the two latents.

Layers without a per-token cache (linear attention, state-space, KV-sharing layers) count zero bytes.
No UI imports: drive it from a notebook. The parts: config.py (reading config.json), geometry.py
(what each layer caches), bytes.py (the arithmetic), fit.py (weights and what fits on a GPU),
measure.py (a real cache next to the prediction), presets.py (configs of well-known models).
"""

from playground.kv.bytes import (
    MAX_TOKENS,
    KVBreakdown,
    LayerBytes,
    curve_lengths,
    format_bytes,
    formula_lines,
    kv_cache_breakdown,
    kv_cache_bytes,
    kv_curve,
)
from playground.kv.config import KEY_ALIASES, as_config_dict, load_config_file
from playground.kv.dtypes import GB, GIB, KV_DTYPES, KVDtype, memory_gb, resolve_kv_dtype
from playground.kv.fit import FitResult, estimate_parameters, fit_on_gpu, weights_bytes
from playground.kv.geometry import MODES, KVGeometry, LayerSpec, kv_geometry
from playground.kv.measure import (
    Measurement,
    QuantizedMeasurement,
    measure_quantized_vs_predicted,
    measure_vs_predicted,
    quantized_prediction,
)
from playground.kv.server import ServerKVComparison, cache_dtype, compare_server_kv

__all__ = [
    "GB",
    "GIB",
    "KEY_ALIASES",
    "KV_DTYPES",
    "MAX_TOKENS",
    "MODES",
    "FitResult",
    "KVBreakdown",
    "KVDtype",
    "KVGeometry",
    "LayerBytes",
    "LayerSpec",
    "Measurement",
    "QuantizedMeasurement",
    "ServerKVComparison",
    "as_config_dict",
    "cache_dtype",
    "compare_server_kv",
    "curve_lengths",
    "estimate_parameters",
    "fit_on_gpu",
    "format_bytes",
    "formula_lines",
    "kv_cache_breakdown",
    "kv_cache_bytes",
    "kv_curve",
    "kv_geometry",
    "load_config_file",
    "measure_quantized_vs_predicted",
    "measure_vs_predicted",
    "memory_gb",
    "quantized_prediction",
    "resolve_kv_dtype",
    "weights_bytes",
]
