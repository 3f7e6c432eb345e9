"""Weights next to the cache: parameter estimates, and the longest context / largest batch that fit."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from playground.errors import PlaygroundError
from playground.kv.bytes import MAX_TOKENS, check_lengths, total_bytes
from playground.kv.dtypes import KVDtype, resolve_kv_dtype
from playground.kv.geometry import (
    ATTENTION_HEADS,
    HIDDEN_SIZE,
    ConfigReader,
    KVGeometry,
    kv_geometry,
    make_reader,
)

# --- weights and what fits ------------------------------------------------------------------------

_TWO_MATRIX_MLP = {
    "gpt2",
    "falcon",
    "gpt_neox",
    "gpt_neo",
    "gptj",
    "opt",
    "bloom",
    "phi",
    "gpt_bigcode",
    "starcoder2",
}
_EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")


def _attention_params(r: ConfigReader, hidden: int, geometry: KVGeometry) -> int:
    """Q, K, V, O projections of one layer (MLA: its down/up projections)."""
    heads = r.get("heads", ATTENTION_HEADS) or 1
    if geometry.layers and geometry.layers[0].kind == "mla":
        rank, rope = geometry.layers[0].k_dim, geometry.layers[0].v_dim
        nope = r.get("qk_nope_head_dim", "qk_nope_head_dim") or 0
        v_dim = r.get("v_head_dim", "v_head_dim") or 0
        q_rank = r.get("q_lora_rank", "q_lora_rank")
        q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
        return q + hidden * (rank + rope) + rank * heads * (nope + v_dim) + heads * v_dim * hidden
    full = next((lay for lay in geometry.layers if lay.kind != "none"), None)
    head_dim = full.k_dim if full else hidden // heads
    kv = full.kv_heads if full else heads
    return 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim


def _mlp_params(r: ConfigReader, hidden: int, layer: int, model_type: str | None) -> int:
    """One layer's feed-forward: gated (3 matrices) or classic (2); MoE: routed + shared experts + router."""
    matrices = 2 if model_type in _TWO_MATRIX_MLP else 3
    dense = r.text.get("intermediate_size") or r.text.get("n_inner") or r.text.get("ffn_hidden_size")
    dense = dense or getattr(r.obj, "intermediate_size", None) or 4 * hidden
    experts = next((r.text[k] for k in _EXPERT_KEYS if r.text.get(k)), None)
    if not experts or layer < (r.text.get("first_k_dense_replace") or 0):
        return matrices * hidden * dense
    expert_size = r.text.get("moe_intermediate_size") or dense
    shared = (r.text.get("n_shared_experts") or 0) * expert_size
    shared += r.text.get("shared_expert_intermediate_size") or 0
    return matrices * hidden * (experts * expert_size + shared) + hidden * experts


def estimate_parameters(config: Any) -> int:
    """Parameters estimated from a config (embeddings, attention, MLP / MoE; norms and biases left out)."""
    geometry = kv_geometry(config, "ideal")
    reader, _ = make_reader(config)
    hidden = reader.get("hidden", HIDDEN_SIZE)
    if hidden is None:
        raise PlaygroundError(
            "Cannot estimate the weights without hidden_size: enter the parameter count.",
            key="kv.error.no_hidden",
        )
    vocab = reader.text.get("vocab_size") or getattr(reader.obj, "vocab_size", None) or 0
    tied = reader.text.get("tie_word_embeddings", getattr(reader.obj, "tie_word_embeddings", False))
    total = vocab * hidden * (1 if tied else 2)
    attention = _attention_params(reader, hidden, geometry)
    for index, layer in enumerate(geometry.layers):
        total += attention if layer.kind != "none" else 0
        total += _mlp_params(reader, hidden, index, geometry.model_type)
    return int(total)


def weights_bytes(num_parameters: float, dtype: str = "bfloat16") -> int:
    """Bytes of `num_parameters` weights stored in `dtype` (block formats include their scales)."""
    if num_parameters < 0:
        raise PlaygroundError(
            "The parameter count must not be negative, got {count!r}.",
            key="kv.error.negative",
            count=num_parameters,
        )
    return math.ceil(resolve_kv_dtype(dtype).bytes_for(num_parameters))


@dataclass(frozen=True)
class FitResult:
    """Whether weights + KV cache fit on a GPU, and the longest context / largest batch that do."""

    gpu_bytes: int
    weights_bytes: int
    overhead_bytes: int  # reserved for activations, CUDA context, allocator fragmentation
    kv_bytes: int  # at the requested length and batch
    free_for_kv: int  # gpu - weights - overhead (negative: the weights alone do not fit)
    fits: bool
    max_seq_len: int | None  # longest context at this batch; None = any length (windows cap the cache)
    max_batch: int | None  # largest batch at the requested length; None = unbounded (no per-token cache)
    context_limit: int | None = None  # the model's own longest context (max_seq_len is memory's alone)


def fit_on_gpu(
    config: Any,
    gpu_bytes: int,
    weights: int,
    seq_len: int,
    batch_size: int = 1,
    dtype: str = "float16",
    mode: str = "ideal",
    overhead_fraction: float = 0.10,
) -> FitResult:
    """The largest context (at `batch_size`) and batch (at `seq_len`) that fit next to the weights."""
    if gpu_bytes <= 0:
        raise PlaygroundError(
            "GPU memory must be positive, got {value!r} bytes.", key="kv.error.gpu", value=gpu_bytes
        )
    if not 0 <= overhead_fraction < 1:
        raise PlaygroundError(
            "The overhead fraction must be in [0, 1), got {value!r}.",
            key="kv.error.overhead",
            value=overhead_fraction,
        )
    seq, batch = check_lengths(seq_len, batch_size)
    geometry, spec = kv_geometry(config, mode), resolve_kv_dtype(dtype)
    overhead = int(gpu_bytes * overhead_fraction)
    free = gpu_bytes - weights - overhead
    kv = total_bytes(geometry, spec, seq, batch)
    per_sequence = total_bytes(geometry, spec, seq, 1)
    max_batch = None if per_sequence == 0 else max(free, 0) // per_sequence
    max_seq = _max_seq_len(geometry, spec, batch, free)
    limit = geometry.context_limit
    return FitResult(gpu_bytes, weights, overhead, kv, free, kv <= free, max_seq, max_batch, limit)


def _max_seq_len(geometry: KVGeometry, spec: KVDtype, batch: int, free: int) -> int | None:
    """Largest seq_len whose cache fits in `free` bytes (bytes never shrink as seq_len grows)."""
    if total_bytes(geometry, spec, MAX_TOKENS, batch) <= free:
        grows = any(layer.kind != "none" and layer.window is None for layer in geometry.layers)
        return MAX_TOKENS if grows else None
    low, high = 0, MAX_TOKENS  # invariant: bytes(low) fits (bytes(0) = 0), bytes(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        if total_bytes(geometry, spec, mid, batch) <= free:
            low = mid
        else:
            high = mid
    return low
