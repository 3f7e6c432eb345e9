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
The engine has no UI imports: drive it from a notebook.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playground.errors import PlaygroundError

GIB = 2**30  # gibibyte: what nvidia-smi (MiB) and torch report
GB = 10**9  # gigabyte: what GPU vendors print on the box
MODES = ("ideal", "transformers")
MAX_TOKENS = 2**24  # longest context the solver considers (16.7 M tokens)

# --- dtypes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVDtype:
    """How many bytes a cached vector of n elements takes."""

    name: str
    bits: int  # bits per element (the quantized payload for block formats)
    block: int = 0  # elements per block for block formats (llama.cpp), else 0
    scale_bytes: int = 0  # bytes of the per-block scale (a float16 in q8_0 / q4_0)
    note: str = ""

    def row_bytes(self, n: int) -> int:
        """Bytes of one vector of `n` elements (one head's key or value for one token)."""
        if self.block:
            blocks = -(-n // self.block)  # a partial last block is stored whole
            return blocks * (self.block * self.bits // 8 + self.scale_bytes)
        return -(-n * self.bits // 8)

    def bytes_for(self, elements: int) -> float:
        """Average bytes for `elements` values (weights): may be fractional for 4-bit formats."""
        if self.block:
            return elements / self.block * (self.block * self.bits / 8 + self.scale_bytes)
        return elements * self.bits / 8


DTYPES: dict[str, KVDtype] = {
    d.name: d
    for d in (
        KVDtype("float32", 32, note="4 bytes per value"),
        KVDtype("float16", 16, note="2 bytes per value"),
        KVDtype("bfloat16", 16, note="2 bytes per value"),
        KVDtype("fp8", 8, note="1 byte per value (e4m3/e5m2; per-tensor scales not counted)"),
        KVDtype("int8", 8, note="1 byte per value (scales not counted)"),
        KVDtype("int4", 4, note="half a byte per value, two per byte (scales not counted)"),
        KVDtype(
            "q8_0", 8, 32, 2, note="llama.cpp: blocks of 32 int8 + one float16 scale = 34 bytes / 32 values"
        ),
        KVDtype(
            "q4_0", 4, 32, 2, note="llama.cpp: blocks of 32 4-bit + one float16 scale = 18 bytes / 32 values"
        ),
    )
}
_DTYPE_ALIASES = {
    "fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
    "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "q8": "q8_0", "q4": "q4_0",
}  # fmt: skip


def resolve_dtype(dtype: Any) -> KVDtype:
    """'float16', 'bf16', 'torch.float32', torch.bfloat16, 'q4_0', ... -> KVDtype; else PlaygroundError."""
    name = str(dtype).strip().lower().removeprefix("torch.")
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise PlaygroundError(f"Unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}.")
    return DTYPES[name]


# --- reading a config ----------------------------------------------------------------------------

# Each quantity and the key names families use for it, in order of preference.
KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads", "multi_query_group_num"),
    "hidden": ("hidden_size", "n_embd", "d_model", "n_embed", "dim"),
    "head_dim": ("head_dim", "attention_head_dim", "kv_channels"),
}
_NESTED_TEXT_KEYS = ("text_config", "llm_config", "language_config")
_NO_CACHE_TYPES = ("linear", "mamba", "conv", "recurrent", "ssm", "mlp", "moe", "dummy", "rwkv")


def _text_dict(raw: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The decoder's part of a config.json and the prefix to name its keys ('text_config.' or '')."""
    for key in _NESTED_TEXT_KEYS:
        if isinstance(raw.get(key), Mapping):
            return dict(raw[key]), key + "."
    return dict(raw), ""


def _parse_json(config: str) -> dict[str, Any]:
    try:
        parsed = json.loads(config)
    except json.JSONDecodeError as exc:
        raise PlaygroundError(
            f"The config is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from exc
    if not isinstance(parsed, dict):
        raise PlaygroundError(f"A config.json must be a JSON object {{...}}, got {type(parsed).__name__}.")
    return parsed


def as_config_dict(config: Any) -> dict[str, Any]:
    """A config given as a dict, a JSON string or a transformers config object -> a plain dict."""
    if isinstance(config, str):
        return _parse_json(config)
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "to_dict"):
        return config.to_dict()
    raise PlaygroundError(
        f"Expected a config.json dict or a transformers config, got {type(config).__name__}."
    )


def _config_class(model_type: Any) -> Any:
    """The transformers config class for a model_type, or None when transformers does not know it."""
    if not isinstance(model_type, str):
        return None
    from transformers import CONFIG_MAPPING

    try:
        return CONFIG_MAPPING[model_type]
    except KeyError:
        return None


def _known_keys(cls: Any) -> set[str]:
    fields = set(getattr(cls, "__dataclass_fields__", {}))
    return fields | set(getattr(cls, "attribute_map", {})) | {n for n in dir(cls) if not n.startswith("_")}


def _normalize_aliases(text: dict[str, Any], cls: Any) -> dict[str, Any]:
    """Rename a family key the class does not know (say n_layer for a class that wants num_hidden_layers)."""
    known = _known_keys(cls)
    out = dict(text)
    for names in KEY_ALIASES.values():
        if any(n in out and n in known for n in names):
            continue
        present = next((n for n in names if n in out), None)
        target = next((n for n in names if n in known), None)
        if present and target:
            out[target] = out.pop(present)
    return out


def _build_config_object(raw: dict[str, Any]) -> Any:
    """The decoder config object transformers itself would build (class defaults and all), or None."""
    cls = _config_class(raw.get("model_type"))
    if cls is None:
        return None
    text, prefix = _text_dict(raw)
    try:
        if prefix:
            text_cls = _config_class(text.get("model_type"))
            text = _normalize_aliases(text, text_cls) if text_cls else text
            obj = cls(**{**raw, prefix[:-1]: text})
        else:
            obj = cls(**_normalize_aliases(raw, cls))
        return obj.get_text_config(decoder=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise PlaygroundError(f"transformers rejects this {raw.get('model_type')!r} config: {first}") from exc


# --- geometry: what each layer caches ------------------------------------------------------------


@dataclass(frozen=True)
class LayerSpec:
    """What one decoder layer caches per token and sequence."""

    index: int
    kind: str  # "full", "sliding", "chunked", "mla" or "none" (no per-token cache)
    kv_heads: int  # vectors per token for K (and for V); 1 for an MLA latent
    k_dim: int  # elements of one key vector (kv_lora_rank for MLA)
    v_dim: int  # elements of one value vector (qk_rope_head_dim for MLA: the shared rotary key)
    window: int | None = None  # sliding window / attention chunk, in tokens


@dataclass(frozen=True)
class KVGeometry:
    """Per-layer cache geometry of one model in one mode, and where each number came from."""

    model_type: str | None
    mode: str
    layers: tuple[LayerSpec, ...]
    sources: tuple[tuple[str, str, str], ...]  # (quantity, value, config key or rule it came from)
    notes: tuple[str, ...] = ()

    def tokens_held(self, layer: LayerSpec, seq_len: int) -> int:
        """Tokens one sequence keeps in `layer` after `seq_len` tokens went through the model."""
        if layer.kind == "none":
            return 0
        if layer.window is None:
            return seq_len
        if self.mode == "ideal":
            return min(seq_len, layer.window)
        # DynamicSlidingWindowLayer keeps keys[:, :, -window + 1 :]: window - 1 tokens (all if window is 1)
        return seq_len if layer.window <= 1 else min(seq_len, layer.window - 1)


@dataclass
class _Reader:
    """Looks a quantity up in the raw decoder dict first (explicit keys), then in the config object."""

    text: dict[str, Any]
    prefix: str  # "text_config." for nested configs
    obj: Any  # the transformers config object, or None for model types transformers does not know
    sources: list[tuple[str, str, str]] = field(default_factory=list)

    def explicit(self, quantity: str) -> tuple[Any, str | None]:
        for name in KEY_ALIASES.get(quantity, (quantity,)):
            if self.text.get(name) is not None:
                return self.text[name], self.prefix + name
        return None, None

    def get(self, quantity: str, label: str) -> Any:
        value, key = self.explicit(quantity)
        if value is None and self.obj is not None:
            for name in KEY_ALIASES.get(quantity, (quantity,)):
                if getattr(self.obj, name, None) is not None:
                    value, key = getattr(self.obj, name), f"default of {type(self.obj).__name__}"
                    break
        if value is not None:
            self.note(label, value, key or "")
        return value

    def note(self, label: str, value: Any, source: str) -> None:
        self.sources.append((label, str(value), source))


def _positive_int(value: Any, label: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value <= 0:
        raise PlaygroundError(f"{label} must be a positive whole number, got {value!r}.")
    return int(value)


def _require(reader: _Reader, strict: bool) -> None:
    """Name the keys a raw config lacks: the layer count, a hidden size or head_dim, and (without a
    transformers class to supply defaults) the number of attention heads."""
    if not strict:
        return
    groups = [("layers",), ("hidden", "head_dim")]
    if reader.obj is None and reader.text.get("kv_lora_rank") is None:
        groups.append(("heads",))
    missing = []
    for group in groups:
        if all(reader.explicit(q)[0] is None for q in group):
            names = " or ".join(KEY_ALIASES[q][0] for q in group)
            aliases = ", ".join(a for q in group for a in KEY_ALIASES[q][1:])
            missing.append(f"{names} (or one of {aliases})")
    if missing:
        where = f" in {reader.prefix[:-1]}" if reader.prefix else ""
        raise PlaygroundError(f"The config lacks the key(s) it needs{where}: {'; '.join(missing)}.")


def _head_dim(reader: _Reader, heads: int | None) -> int:
    """An explicit head_dim wins over hidden_size / num_attention_heads."""
    value, key = reader.explicit("head_dim")
    if value is not None:
        reader.note("head_dim", value, key or "")
        return _positive_int(value, "head_dim")
    hidden, hidden_key = reader.explicit("hidden")
    if hidden is None and reader.obj is not None:
        hidden = getattr(reader.obj, "hidden_size", None)
        hidden_key = f"default of {type(reader.obj).__name__}"
    obj_dim = getattr(reader.obj, "head_dim", None) if reader.obj is not None else None
    if isinstance(obj_dim, int) and (hidden is None or not heads or obj_dim != hidden // heads):
        reader.note("head_dim", obj_dim, f"default of {type(reader.obj).__name__}")
        return obj_dim
    if hidden is None or not heads:
        raise PlaygroundError("The config lacks head_dim and hidden_size / num_attention_heads to derive it.")
    reader.note("head_dim", hidden // heads, f"{hidden_key} / num_attention_heads = {hidden} / {heads}")
    return _positive_int(hidden // heads, "head_dim")


def _kv_heads(reader: _Reader, heads: int, mode: str) -> int:
    """KV heads: MHA (= heads), GQA (num_key_value_heads), MQA (1, e.g. multi_query); Falcon's own rules."""
    text, family = reader.text, reader.text.get("model_type")
    if family == "falcon" or (reader.obj is not None and type(reader.obj).__name__ == "FalconConfig"):
        return _falcon_kv_heads(reader, heads, mode)
    value = reader.get("kv_heads", "KV heads")
    if value is not None:
        return _positive_int(value, "num_key_value_heads")
    if text.get("multi_query"):
        reader.note("KV heads", 1, reader.prefix + "multi_query = true (MQA)")
        return 1
    reader.note("KV heads", heads, "num_attention_heads (no KV-head key: multi-head attention)")
    return heads


def _falcon_kv_heads(reader: _Reader, heads: int, mode: str) -> int:
    """Falcon: new_decoder_architecture -> num_kv_heads groups; else multi_query -> 1; else MHA."""
    text = reader.text
    if text.get("new_decoder_architecture"):
        kv = _positive_int(reader.explicit("kv_heads")[0] or heads, "num_kv_heads")
        if mode == "transformers":
            reader.note(
                "KV heads", heads, "num_attention_heads: transformers caches Falcon K/V for every head"
            )
            return heads
        reader.note("KV heads", kv, reader.prefix + "num_kv_heads (new_decoder_architecture)")
        return kv
    if text.get("multi_query", True):
        reader.note("KV heads", 1, reader.prefix + "multi_query (Falcon default true: MQA)")
        return 1
    reader.note("KV heads", heads, reader.prefix + "multi_query = false (MHA)")
    return heads


def _kind_of(layer_type: Any) -> str:
    """A layer-type string (transformers' or a family's own) -> full / sliding / chunked / none."""
    name = str(layer_type).lower()
    if "chunk" in name:
        return "chunked"
    if "sliding" in name or "local" in name:
        return "sliding"
    if any(tag in name for tag in _NO_CACHE_TYPES) and "hybrid" not in name:
        return "none"
    return "full"


def _types_from_transformers(obj: Any) -> tuple[list[str], list[int | None]] | None:
    """The layer types and windows DynamicCache(config=...) itself derives (None if it cannot)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    try:
        types, kwargs = get_layer_types_and_kwargs(obj)
    except Exception:
        return None
    return [_kind_of(t) for t in types], [kw.get("sliding_window") for kw in kwargs]


def _window_value(text: dict[str, Any]) -> int | None:
    """The sliding window, unless the config switches it off (Qwen2's use_sliding_window: false)."""
    if text.get("use_sliding_window") is False:
        return None
    return text.get("sliding_window") or text.get("attention_window_size")


def _types_from_dict(text: dict[str, Any], n_layers: int) -> tuple[list[str], list[int | None]]:
    """Layer kinds from a raw config: layer_types, sliding_window_pattern, max_window_layers, hybrids."""
    window = _window_value(text)
    listed = text.get("layer_types") or text.get("layers_block_type")
    if isinstance(listed, list) and len(listed) == n_layers:
        kinds = [_kind_of(t) for t in listed]
    elif isinstance(text.get("attn_layer_indices"), list):
        kinds = ["full" if i in text["attn_layer_indices"] else "none" for i in range(n_layers)]
    elif window is None:
        kinds = ["full"] * n_layers
    elif isinstance(text.get("sliding_window_pattern"), int) and text["sliding_window_pattern"] > 0:
        pattern = text["sliding_window_pattern"]
        kinds = ["sliding" if (i + 1) % pattern else "full" for i in range(n_layers)]
    elif text.get("use_sliding_window") and isinstance(text.get("max_window_layers"), int):
        kinds = ["sliding" if i >= text["max_window_layers"] else "full" for i in range(n_layers)]
    else:
        kinds = ["sliding"] * n_layers
    chunk = text.get("attention_chunk_size")
    windows = [window if k == "sliding" else chunk if k == "chunked" else None for k in kinds]
    if any(k == "sliding" for k in kinds) and window is None:
        raise PlaygroundError("The config has sliding-window layers but no sliding_window size.")
    return kinds, windows


def _gpt_neo_local(obj_or_text: Any, kinds: list[str], windows: list[int | None]) -> None:
    """GPT-Neo marks local layers in attention_layers; an efficient engine keeps only window_size there."""
    get = obj_or_text.get if isinstance(obj_or_text, dict) else lambda k: getattr(obj_or_text, k, None)
    layers, window = get("attention_layers"), get("window_size")
    if isinstance(layers, list) and window and len(layers) == len(kinds):
        for i, kind in enumerate(layers):
            if kind == "local":
                kinds[i], windows[i] = "sliding", int(window)


def _layer_kinds(reader: _Reader, n_layers: int, mode: str) -> tuple[list[str], list[int | None]]:
    found = _types_from_transformers(reader.obj) if reader.obj is not None else None
    if found is not None and len(found[0]) == n_layers:
        kinds, windows = found
        source = f"as transformers derives them ({type(reader.obj).__name__})"
        reader.note("layer kinds", _summarize(kinds, windows), source)
    else:
        kinds, windows = _types_from_dict(reader.text, n_layers)
        reader.note("layer kinds", _summarize(kinds, windows), _kinds_source(reader.text))
    if mode == "ideal":
        _gpt_neo_local(reader.obj if reader.obj is not None else reader.text, kinds, windows)
    return kinds, windows


def _kinds_source(text: dict[str, Any]) -> str:
    for key in ("layer_types", "layers_block_type", "attn_layer_indices", "sliding_window_pattern"):
        if key in text:
            return key
    if text.get("use_sliding_window") is False:
        return "use_sliding_window = false (no window)"
    return "sliding_window on every layer" if _window_value(text) else "no sliding_window: full attention"


def _summarize(kinds: list[str], windows: list[int | None]) -> str:
    counts: dict[str, int] = {}
    for kind, window in zip(kinds, windows, strict=True):
        label = f"{kind} (window {window})" if window else kind
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n} × {label}" for label, n in counts.items())


def _mla_dims(reader: _Reader) -> tuple[int, int] | None:
    """(kv_lora_rank, qk_rope_head_dim) for Multi-head Latent Attention (DeepSeek-V2/V3), else None."""
    rank = reader.get("kv_lora_rank", "kv_lora_rank (MLA latent)")
    if rank is None:
        return None
    rope = reader.get("qk_rope_head_dim", "qk_rope_head_dim (MLA rotary key)")
    if rope is None:
        raise PlaygroundError("An MLA config (kv_lora_rank set) also needs qk_rope_head_dim.")
    return _positive_int(rank, "kv_lora_rank"), _positive_int(rope, "qk_rope_head_dim")


def _make_reader(config: Any) -> tuple[_Reader, bool]:
    """A reader over the decoder config; the flag says whether the input was a raw dict (check keys)."""
    if not isinstance(config, (str, Mapping)) and hasattr(config, "get_text_config"):
        obj = config.get_text_config(decoder=True)
        return _Reader(obj.to_dict(), "", obj), False
    raw = as_config_dict(config)
    text, prefix = _text_dict(raw)
    return _Reader(text, prefix, _build_config_object(raw)), True


def _standard_layers(
    reader: _Reader, kinds: list[str], windows: list[int | None], mode: str
) -> list[LayerSpec]:
    """MHA / GQA / MQA layers: kv_heads K and V vectors of head_dim each per token."""
    heads_value = reader.get("heads", "attention heads")
    if heads_value is None:
        raise PlaygroundError("The config lacks num_attention_heads (or n_head, num_heads, n_heads).")
    heads = _positive_int(heads_value, "num_attention_heads")
    head_dim = _head_dim(reader, heads)
    kv = _kv_heads(reader, heads, mode)
    return [
        LayerSpec(i, k, kv, head_dim, head_dim, w)
        for i, (k, w) in enumerate(zip(kinds, windows, strict=True))
    ]


def _build_geometry(config: Any, mode: str) -> KVGeometry:
    reader, strict = _make_reader(config)
    _require(reader, strict)
    n_layers = _positive_int(reader.get("layers", "layers"), "num_hidden_layers")
    kinds, windows = _layer_kinds(reader, n_layers, mode)
    for window in windows:
        if window is not None:
            _positive_int(window, "sliding_window")
    mla = _mla_dims(reader)
    if mla is None:
        layers = _standard_layers(reader, kinds, windows, mode)
    else:
        pairs = enumerate(zip(kinds, windows, strict=True))
        layers = [LayerSpec(i, "none" if k == "none" else "mla", 1, mla[0], mla[1], w) for i, (k, w) in pairs]
    model_type = reader.text.get("model_type") or getattr(reader.obj, "model_type", None)
    return KVGeometry(model_type, mode, tuple(layers), tuple(reader.sources), _notes(layers, mode))


def _notes(layers: list[LayerSpec], mode: str) -> tuple[str, ...]:
    notes = []
    if any(layer.kind == "none" for layer in layers):
        notes.append(
            "Layers without attention (linear attention / state-space / shared KV) hold no per-token "
            "cache; their fixed-size recurrent state is not counted here."
        )
    if mode == "transformers" and any(layer.window for layer in layers):
        notes.append("transformers' DynamicSlidingWindowLayer keeps the last window - 1 tokens.")
    if any(layer.kind == "mla" for layer in layers):
        notes.append(
            "MLA caches one latent (kv_lora_rank) plus one shared rotary key (qk_rope_head_dim) per "
            "token, for all heads together; transformers caches the same latents."
        )
    return tuple(notes)


@functools.lru_cache(maxsize=512)
def _geometry_cached(canonical_json: str, mode: str) -> KVGeometry:
    return _build_geometry(json.loads(canonical_json), mode)


def kv_geometry(config: Any, mode: str = "ideal") -> KVGeometry:
    """Per-layer cache geometry from a config.json dict, a JSON string or a transformers config object."""
    if mode not in MODES:
        raise PlaygroundError(f"Unknown mode {mode!r}: use 'ideal' or 'transformers'.")
    if isinstance(config, (str, Mapping)):
        raw = as_config_dict(config)
        try:
            canonical = json.dumps(raw, sort_keys=True)
        except (TypeError, ValueError):
            return _build_geometry(raw, mode)
        return _geometry_cached(canonical, mode)
    return _build_geometry(config, mode)


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

    @property
    def gib(self) -> float:
        return self.total_bytes / GIB

    @property
    def gb(self) -> float:
        return self.total_bytes / GB


def _check_lengths(seq_len: Any, batch_size: Any) -> tuple[int, int]:
    seq = _positive_int(seq_len, "Sequence length")
    batch = _positive_int(batch_size, "Batch size")
    if seq > MAX_TOKENS:
        raise PlaygroundError(f"Sequence length {seq} is beyond what this calculator handles ({MAX_TOKENS}).")
    return seq, batch


def _layer_bytes(geometry: KVGeometry, layer: LayerSpec, dtype: KVDtype, seq_len: int, batch: int) -> int:
    per_token = layer.kv_heads * (dtype.row_bytes(layer.k_dim) + dtype.row_bytes(layer.v_dim))
    return batch * geometry.tokens_held(layer, seq_len) * per_token


def _total_bytes(geometry: KVGeometry, dtype: KVDtype, seq_len: int, batch: int) -> int:
    return sum(_layer_bytes(geometry, layer, dtype, seq_len, batch) for layer in geometry.layers)


def kv_cache_breakdown(
    config: Any, seq_len: int, batch_size: int = 1, dtype: str = "float16", mode: str = "ideal"
) -> KVBreakdown:
    """Per-layer KV-cache bytes after `seq_len` tokens for `batch_size` sequences.

    config: a config.json dict (or its JSON text) or a transformers config object.
    Cached per layer: K (batch, kv_heads, tokens_held, k_dim) and V (batch, kv_heads, tokens_held, v_dim).
    """
    seq, batch = _check_lengths(seq_len, batch_size)
    spec = resolve_dtype(dtype)
    geometry = kv_geometry(config, mode)
    layers = tuple(
        LayerBytes(
            layer.index, layer.kind, layer.kv_heads, layer.k_dim, layer.v_dim,
            geometry.tokens_held(layer, seq), _layer_bytes(geometry, layer, spec, seq, batch),
        )
        for layer in geometry.layers
    )  # fmt: skip
    return KVBreakdown(geometry, seq, batch, spec, layers, sum(layer.bytes for layer in layers))


def kv_cache_bytes(
    config: Any, seq_len: int, batch_size: int = 1, dtype: str = "float16", mode: str = "ideal"
) -> int:
    """Exact KV-cache bytes after `seq_len` tokens for `batch_size` sequences (see the module docstring)."""
    seq, batch = _check_lengths(seq_len, batch_size)
    return _total_bytes(kv_geometry(config, mode), resolve_dtype(dtype), seq, batch)


def format_bytes(n: float) -> str:
    """'4.00 GiB (4.29 GB)': GiB = 2^30 bytes, GB = 10^9 bytes; small sizes in MiB / MB."""
    if abs(n) >= GIB / 10:
        return f"{n / GIB:,.2f} GiB ({n / GB:,.2f} GB)"
    return f"{n / 2**20:,.2f} MiB ({n / 10**6:,.2f} MB)"


def formula_lines(breakdown: KVBreakdown) -> list[str]:
    """The formula with the model's numbers substituted, one line per group of identical layers."""
    groups: dict[tuple[str, int, int, int, int], list[int]] = {}
    for layer in breakdown.layers:
        if layer.kind != "none":
            key = (layer.kind, layer.kv_heads, layer.k_dim, layer.v_dim, layer.tokens)
            groups.setdefault(key, []).append(layer.bytes)
    lines = [_group_formula(key, len(sizes), sum(sizes), breakdown) for key, sizes in groups.items()]
    skipped = sum(layer.kind == "none" for layer in breakdown.layers)
    if skipped:
        lines.append(f"{skipped} layers without a KV cache (linear attention, state space, shared) = 0 bytes")
    return lines or ["No layer holds a KV cache: 0 bytes."]


def _group_formula(key: tuple[str, int, int, int, int], count: int, total: int, b: KVBreakdown) -> str:
    kind, heads, k_dim, v_dim, tokens = key
    d = b.dtype
    if kind == "mla":
        per_token = d.row_bytes(k_dim) + d.row_bytes(v_dim)
        return (
            f"{count} MLA layers × ({k_dim} latent + {v_dim} rotary-key values = {per_token} B in {d.name})"
            f" × {tokens:,} tokens × batch {b.batch_size} = {total:,} bytes"
        )
    if d.block or d.bits % 8:
        per_row = f"{d.row_bytes(k_dim)} B per {k_dim}-value row ({d.name})"
    else:
        per_row = f"{k_dim} head_dim × {d.bits // 8} B ({d.name})"
    capped = kind in ("sliding", "chunked") and tokens < b.seq_len
    held = f"{tokens:,} tokens" + (" (window)" if capped else "")
    return (
        f"2 (K and V) × {count} {kind} layers × {heads} KV heads × {per_row} × {held} × batch "
        f"{b.batch_size} = {total:,} bytes"
    )


# --- weights and what fits ------------------------------------------------------------------------

_TWO_MATRIX_MLP = {
    "gpt2", "falcon", "gpt_neox", "gpt_neo", "gptj", "opt", "bloom", "phi", "gpt_bigcode", "starcoder2",
}  # fmt: skip
_EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")


def _attention_params(r: _Reader, hidden: int, geometry: KVGeometry) -> int:
    """Q, K, V, O projections of one layer (MLA: its down/up projections)."""
    heads = r.get("heads", "attention heads") or 1
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


def _mlp_params(r: _Reader, hidden: int, layer: int, model_type: str | None) -> int:
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
    reader, _ = _make_reader(config)
    hidden = reader.get("hidden", "hidden size")
    if hidden is None:
        raise PlaygroundError("Cannot estimate the weights without hidden_size: enter the parameter count.")
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
        raise PlaygroundError(f"The parameter count must not be negative, got {num_parameters!r}.")
    return math.ceil(resolve_dtype(dtype).bytes_for(num_parameters))


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
        raise PlaygroundError(f"GPU memory must be positive, got {gpu_bytes!r} bytes.")
    if not 0 <= overhead_fraction < 1:
        raise PlaygroundError(f"The overhead fraction must be in [0, 1), got {overhead_fraction!r}.")
    seq, batch = _check_lengths(seq_len, batch_size)
    geometry, spec = kv_geometry(config, mode), resolve_dtype(dtype)
    overhead = int(gpu_bytes * overhead_fraction)
    free = gpu_bytes - weights - overhead
    kv = _total_bytes(geometry, spec, seq, batch)
    per_sequence = _total_bytes(geometry, spec, seq, 1)
    max_batch = None if per_sequence == 0 else max(free, 0) // per_sequence
    max_seq = _max_seq_len(geometry, spec, batch, free)
    return FitResult(gpu_bytes, weights, overhead, kv, free, kv <= free, max_seq, max_batch)


def _max_seq_len(geometry: KVGeometry, spec: KVDtype, batch: int, free: int) -> int | None:
    """Largest seq_len whose cache fits in `free` bytes (bytes never shrink as seq_len grows)."""
    if _total_bytes(geometry, spec, MAX_TOKENS, batch) <= free:
        grows = any(layer.kind != "none" and layer.window is None for layer in geometry.layers)
        return MAX_TOKENS if grows else None
    low, high = 0, MAX_TOKENS  # invariant: bytes(low) fits (bytes(0) = 0), bytes(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        if _total_bytes(geometry, spec, mid, batch) <= free:
            low = mid
        else:
            high = mid
    return low


# --- measured vs predicted --------------------------------------------------------------------------


def cache_layer_bytes(cache: Any) -> list[int]:
    """Bytes each layer of a transformers Cache holds: Σ numel × element_size of its keys and values."""
    cache = getattr(cache, "self_attention_cache", cache)  # EncoderDecoderCache: the decoder's own cache
    sizes = []
    for layer in cache.layers:
        tensors = (getattr(layer, "keys", None), getattr(layer, "values", None))
        sizes.append(sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "numel")))
    return sizes


def cache_dtype(cache: Any) -> str | None:
    """The dtype of a real cache's key tensors ("float32", "bfloat16", ...), or None if it holds none.

    It is the model's compute dtype, whatever KV dtype the calculator is set to; predicting in it is what
    makes measured and predicted equal to the byte."""
    cache = getattr(cache, "self_attention_cache", cache)
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if hasattr(keys, "dtype") and keys.numel():
            return str(keys.dtype).removeprefix("torch.")
    return None


@dataclass(frozen=True)
class Measurement:
    """A real cache built by a forward pass next to the prediction for the same model and shape."""

    seq_len: int
    batch_size: int
    dtype: str
    measured_layers: tuple[int, ...]  # bytes per layer held by the real cache
    predicted: KVBreakdown  # mode "transformers", the cache's own dtype

    @property
    def measured_bytes(self) -> int:
        return sum(self.measured_layers)

    @property
    def equal(self) -> bool:
        return self.measured_bytes == self.predicted.total_bytes


def build_real_cache(model: Any, seq_len: int, batch_size: int = 1, seed: int = 0) -> Any:
    """Run `model` on (batch_size, seq_len) synthetic token ids and return the cache it filled."""
    import torch

    seq, batch = _check_lengths(seq_len, batch_size)
    vocab = model.get_input_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=generator).to(model.device)  # (batch, seq)
    with torch.inference_mode():
        try:
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)  # skip (batch, seq, vocab) logits
        except TypeError:
            out = model(input_ids=ids, use_cache=True)
    return out.past_key_values


def measure_vs_predicted(model: Any, seq_len: int, batch_size: int = 1, lock: Any = None) -> Measurement:
    """Build a real cache for `seq_len` tokens and compare its bytes with the "transformers" prediction.

    Hold `lock` (the LoadedModel's RLock) around the forward pass when the model is shared."""
    import contextlib

    with lock if lock is not None else contextlib.nullcontext():
        cache = build_real_cache(model, seq_len, batch_size)
    measured = tuple(cache_layer_bytes(cache))
    dtype = cache_dtype(cache) or str(model.dtype).removeprefix("torch.")
    predicted = kv_cache_breakdown(model.config, seq_len, batch_size, dtype=dtype, mode="transformers")
    return Measurement(seq_len, batch_size, dtype, measured, predicted)


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
    geometry, spec = kv_geometry(config, mode), resolve_dtype(dtype)
    _check_lengths(max(lengths), batch_size)
    groups: dict[int | None, int] = {}  # layers with the same window summed: per-token bytes
    for layer in geometry.layers:
        if layer.kind != "none":
            per_token = layer.kv_heads * (spec.row_bytes(layer.k_dim) + spec.row_bytes(layer.v_dim))
            groups[layer.window] = groups.get(layer.window, 0) + per_token
    probe = {w: LayerSpec(0, "sliding" if w else "full", 1, 1, 1, w) for w in groups}
    return [
        batch_size * sum(geometry.tokens_held(probe[w], n) * b for w, b in groups.items()) for n in lengths
    ]


CONFIG_NAME = "config.json"  # the only file name the loader opens
MAX_CONFIG_BYTES = 4 * 2**20  # larger than any published config.json; refuse bigger files unread
_MODEL_MARKERS = ("model_type", "architectures", *(k for keys in KEY_ALIASES.values() for k in keys))
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def load_config_file(path_or_id: str) -> dict[str, Any]:
    """A model's config.json from a local file named config.json, a model directory holding one, or a
    Hub id when online. Anything else is refused, and a refused file's content is never echoed: the app
    may be reachable by others (--host 0.0.0.0, --share, Spaces)."""
    text = str(path_or_id or "").strip()
    if not text:
        raise PlaygroundError("Enter a path to a config.json (or its model directory) or a Hub model id.")
    path = Path(text).expanduser()
    if _HUB_ID.fullmatch(text) and not text.endswith(".json") and not path.exists():
        return _require_model_config(_config_from_hub(text), repr(text))
    return _require_model_config(_read_local_config(_local_config_path(path)), str(path))


def _local_config_path(path: Path) -> Path:
    """`path` itself if it is a file named config.json, or the config.json in a model directory."""
    if path.is_dir():
        if not (path / CONFIG_NAME).is_file():
            raise PlaygroundError(f"The directory {path} has no {CONFIG_NAME}: give a model directory.")
        return path / CONFIG_NAME
    if path.name != CONFIG_NAME:
        raise PlaygroundError(
            f"Refused {path}: only a file named {CONFIG_NAME} (or a model directory holding one) "
            "can be loaded, or a Hub id such as Qwen/Qwen2.5-7B."
        )
    if not path.is_file():
        raise PlaygroundError(f"No file {path}: give an existing config.json or model directory.")
    return path


def _read_local_config(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise PlaygroundError(
                f"Refused {path}: over {MAX_CONFIG_BYTES // 2**20} MiB, not a model config."
            )
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlaygroundError(f"Cannot read {path}: {exc.strerror or type(exc).__name__}.") from exc
    except UnicodeDecodeError as exc:
        raise PlaygroundError(f"Refused {path}: not UTF-8 text, so not a model config.") from exc
    return _parse_json(raw)


def _require_model_config(config: dict[str, Any], where: str) -> dict[str, Any]:
    """Refuse JSON that is not a model config, naming what is missing but none of what is there."""
    text, _ = _text_dict(config)
    if any(key in part for part in (config, text) for key in _MODEL_MARKERS):
        return config
    raise PlaygroundError(
        f"Refused {where}: it does not look like a model config. It has no model_type, no architectures, "
        f"and none of the layer/head keys the calculator needs ({', '.join(KEY_ALIASES['layers'])}; "
        f"{', '.join(KEY_ALIASES['heads'])}; {', '.join(KEY_ALIASES['hidden'])})."
    )


def _config_from_hub(model_id: str) -> dict[str, Any]:
    import os

    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise PlaygroundError(f"{model_id!r} is not a local file or directory, and the Hub is offline here.")
    try:
        from huggingface_hub import hf_hub_download

        return _parse_json(open(hf_hub_download(model_id, "config.json"), encoding="utf-8").read())
    except PlaygroundError:
        raise
    except Exception as exc:  # network, auth and not-found errors all end up here
        raise PlaygroundError(f"Cannot fetch config.json for {model_id!r} from the Hub: {exc}") from exc
