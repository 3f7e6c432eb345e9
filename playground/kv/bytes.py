"""Exact KV-cache bytes from a geometry: per layer, in total, as a formula, and along a curve."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playground.errors import PlaygroundError
from playground.kv.dtypes import GB, GIB, SCALE_BYTES, KVDtype, resolve_kv_dtype
from playground.kv.geometry import KIND_NAMES, KVGeometry, LayerSpec, kv_geometry, positive_int
from playground.messages import Message

MAX_TOKENS = 2**24  # longest context the calculator considers (16.7 M tokens)

# --- bytes ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerBytes:
    """One layer's share of the cache for the whole batch."""

    index: int
    kind: str  # "full", "sliding", "chunked", "mla" or "none"
    kv_heads: int
    k_dim: int
    v_dim: int
    tokens: int  # tokens held per sequence
    bytes: int  # batch × tokens × kv_heads × (row(k_dim) + row(v_dim))


@dataclass(frozen=True)
class KVBreakdown:
    """Total and per-layer KV-cache bytes for one config, length, batch, dtype and mode."""

    geometry: KVGeometry
    seq_len: int
    batch_size: int
    dtype: KVDtype
    layers: tuple[LayerBytes, ...]
    total_bytes: int
    scale_bytes: int = 2  # a group format's scale and zero (the model's dtype: float16 by default)

    @property
    def gib(self) -> float:
        return self.total_bytes / GIB

    @property
    def gb(self) -> float:
        return self.total_bytes / GB


def check_lengths(seq_len: Any, batch_size: Any) -> tuple[int, int]:
    seq = positive_int(seq_len, Message("kv.name.seq_len", "Sequence length"))
    batch = positive_int(batch_size, Message("kv.name.batch_size", "Batch size"))
    if seq > MAX_TOKENS:
        raise PlaygroundError(
            "Sequence length {seq} is beyond what this calculator handles ({most}).",
            key="kv.error.too_long",
            seq=seq,
            most=MAX_TOKENS,
        )
    return seq, batch


def _layer_bytes(
    geometry: KVGeometry, layer: LayerSpec, dtype: KVDtype, seq_len: int, batch: int, scale_bytes: int = 2
) -> int:
    rows = batch * geometry.tokens_held(layer, seq_len) * layer.kv_heads  # one K and one V vector each
    return dtype.tensor_bytes(rows, layer.k_dim, scale_bytes) + dtype.tensor_bytes(
        rows, layer.v_dim, scale_bytes
    )


def total_bytes(geometry: KVGeometry, dtype: KVDtype, seq_len: int, batch: int, scale_bytes: int = 2) -> int:
    return sum(_layer_bytes(geometry, layer, dtype, seq_len, batch, scale_bytes) for layer in geometry.layers)


def scale_size(scale_dtype: Any) -> int:
    """Bytes of one scale of a group format: the model's dtype ('float32', torch.bfloat16, ...)."""
    name = str(scale_dtype).strip().lower().removeprefix("torch.")
    if name not in SCALE_BYTES:
        raise PlaygroundError(
            "Scales are stored in the model's dtype: {allowed}, got {value!r}.",
            key="kv.error.scale_dtype",
            allowed=", ".join(SCALE_BYTES),
            value=scale_dtype,
        )
    return SCALE_BYTES[name]


def kv_cache_breakdown(
    config: Any,
    seq_len: int,
    batch_size: int = 1,
    dtype: str = "float16",
    mode: str = "ideal",
    scale_dtype: Any = "float16",
) -> KVBreakdown:
    """Per-layer KV-cache bytes after `seq_len` tokens for `batch_size` sequences.

    config: a config.json dict (or its JSON text) or a transformers config object.
    Cached per layer: K (batch, kv_heads, tokens_held, k_dim) and V (batch, kv_heads, tokens_held, v_dim).
    scale_dtype: the model's dtype, in which the int8/int4/int2 formats keep their scales and zeros.
    """
    seq, batch = check_lengths(seq_len, batch_size)
    spec, scales = resolve_kv_dtype(dtype), scale_size(scale_dtype)
    geometry = kv_geometry(config, mode)
    layers = tuple(
        LayerBytes(
            layer.index,
            layer.kind,
            layer.kv_heads,
            layer.k_dim,
            layer.v_dim,
            geometry.tokens_held(layer, seq),
            _layer_bytes(geometry, layer, spec, seq, batch, scales),
        )
        for layer in geometry.layers
    )
    return KVBreakdown(geometry, seq, batch, spec, layers, sum(layer.bytes for layer in layers), scales)


def kv_cache_bytes(
    config: Any,
    seq_len: int,
    batch_size: int = 1,
    dtype: str = "float16",
    mode: str = "ideal",
    scale_dtype: Any = "float16",
) -> int:
    """Exact KV-cache bytes after `seq_len` tokens for `batch_size` sequences (see the module docstring)."""
    seq, batch = check_lengths(seq_len, batch_size)
    return total_bytes(
        kv_geometry(config, mode), resolve_kv_dtype(dtype), seq, batch, scale_size(scale_dtype)
    )


def format_bytes(n: float) -> str:
    """'4.00 GiB (4.29 GB)': GiB = 2^30 bytes, GB = 10^9 bytes; small sizes in MiB / MB."""
    if abs(n) >= GIB / 10:
        return f"{n / GIB:,.2f} GiB ({n / GB:,.2f} GB)"
    return f"{n / 2**20:,.2f} MiB ({n / 10**6:,.2f} MB)"


def formula_lines(breakdown: KVBreakdown) -> list[Message]:
    """The formula with the model's numbers substituted, one line per group of identical layers."""
    groups: dict[tuple[str, int, int, int, int], list[int]] = {}
    for layer in breakdown.layers:
        if layer.kind != "none":
            key = (layer.kind, layer.kv_heads, layer.k_dim, layer.v_dim, layer.tokens)
            groups.setdefault(key, []).append(layer.bytes)
    lines = [_group_formula(key, len(sizes), sum(sizes), breakdown) for key, sizes in groups.items()]
    skipped = sum(layer.kind == "none" for layer in breakdown.layers)
    if skipped:
        lines.append(
            Message(
                "kv.formula.no_cache",
                "{count} layers without a KV cache (linear attention, state space, shared) = 0 bytes",
                count=skipped,
            )
        )
    return lines or [Message("kv.formula.empty", "No layer holds a KV cache: 0 bytes.")]


def _group_formula(key: tuple[str, int, int, int, int], count: int, total: int, b: KVBreakdown) -> Message:
    kind, heads, k_dim, v_dim, tokens = key
    d = b.dtype
    if kind == "mla":
        return Message(
            "kv.formula.mla",
            "{count} MLA layers × ({latent} latent + {rope} rotary-key values = {per_token} B in {dtype})"
            " × {tokens:,} tokens × batch {batch} = {total:,} bytes",
            count=count,
            latent=k_dim,
            rope=v_dim,
            per_token=d.row_bytes(k_dim) + d.row_bytes(v_dim),
            dtype=d.name,
            tokens=tokens,
            batch=b.batch_size,
            total=total,
        )
    if d.group:
        return _grouped_formula(key, count, total, b)
    return Message(
        "kv.formula.layers",
        "2 (K and V) × {count} {kind} layers × {heads} KV heads × {per_row} × {held} × batch {batch}"
        "{scales} = {total:,} bytes",
        count=count,
        kind=KIND_NAMES[kind],
        heads=heads,
        per_row=_per_row(d, k_dim),
        held=_held(tokens, kind in ("sliding", "chunked") and tokens < b.seq_len),
        batch=b.batch_size,
        scales=_tensor_scales(d, count),
        total=total,
    )


def _per_row(d: KVDtype, k_dim: int) -> Message:
    if d.block or d.bits % 8:
        return Message(
            "kv.formula.row",
            "{bytes} B per {dim}-value row ({dtype})",
            bytes=d.row_bytes(k_dim),
            dim=k_dim,
            dtype=d.name,
        )
    return Message(
        "kv.formula.element",
        "{dim} head_dim × {bytes} B ({dtype})",
        dim=k_dim,
        bytes=d.bits // 8,
        dtype=d.name,
    )


def _held(tokens: int, windowed: bool) -> Message:
    if windowed:
        return Message("kv.formula.window_tokens", "{tokens:,} tokens (window)", tokens=tokens)
    return Message("kv.formula.tokens", "{tokens:,} tokens", tokens=tokens)


def _tensor_scales(d: KVDtype, count: int) -> str:
    if not d.tensor_scale_bytes:
        return ""
    return Message(
        "kv.formula.scales",
        " + 2 × {count} × {bytes} B float32 scales",
        count=count,
        bytes=d.tensor_scale_bytes,
    )


def _grouped_formula(key: tuple[str, int, int, int, int], count: int, total: int, b: KVBreakdown) -> Message:
    """A QuantizedCache integer format: packed values per layer tensor, a scale and a zero per group."""
    kind, heads, k_dim, _, tokens = key
    d = b.dtype
    return Message(
        "kv.formula.grouped",
        "2 (K and V) × {count} {kind} layers × (⌈{groups:,} groups / {per_byte}⌉ × {group} B of "
        "{bits}-bit values + {groups:,} groups × 2 × {scale} B scale and zero), groups = batch "
        "{batch} × {tokens:,} tokens × {heads} KV heads × {dim} head_dim / {group} = {total:,} bytes",
        count=count,
        kind=KIND_NAMES[kind],
        groups=-(-b.batch_size * tokens * heads * k_dim // d.group),
        per_byte=8 // d.bits,
        group=d.group,
        bits=d.bits,
        scale=b.scale_bytes,
        batch=b.batch_size,
        tokens=tokens,
        heads=heads,
        dim=k_dim,
        total=total,
    )


# --- helpers for the UI and notebooks -----------------------------------------------------------------


def curve_lengths(max_tokens: int, windows: set[int], points: int = 64) -> list[int]:
    """Context lengths to plot from 1 to `max_tokens`, including each window (where curves bend)."""
    step = max(1, max_tokens // points)
    lengths = set(range(step, max_tokens + 1, step)) | {1, max_tokens}
    for w in windows:
        lengths |= {w - 1, w, w + 1} if 1 < w < max_tokens else set()
    return sorted(lengths)


def kv_curve(
    config: Any, lengths: list[int], batch_size: int = 1, dtype: str = "float16", mode: str = "ideal"
) -> list[int]:
    """KV-cache bytes at each length in `lengths` (one geometry, many lengths: fast)."""
    geometry, spec = kv_geometry(config, mode), resolve_kv_dtype(dtype)
    check_lengths(max(lengths), batch_size)
    if spec.group or spec.tensor_scale_bytes:  # not linear in the tokens: each length exactly
        return [total_bytes(geometry, spec, n, batch_size) for n in lengths]
    groups: dict[int | None, int] = {}  # layers with the same window summed: per-token bytes
    for layer in geometry.layers:
        if layer.kind != "none":
            per_token = layer.kv_heads * (spec.row_bytes(layer.k_dim) + spec.row_bytes(layer.v_dim))
            groups[layer.window] = groups.get(layer.window, 0) + per_token
    probe = {w: LayerSpec(0, "sliding" if w else "full", 1, 1, 1, w) for w in groups}
    return [
        batch_size * sum(geometry.tokens_held(probe[w], n) * b for w, b in groups.items()) for n in lengths
    ]
