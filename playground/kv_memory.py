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

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
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
        # DynamicSlidingWindowLayer keeps keys[:, :, -window + 1:], i.e. window - 1 tokens (all if window is 1)
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
    """Name the keys a config lacks: the layer count, and a hidden size or a head_dim."""
    missing = []
    needs = [("layers",), ("hidden", "head_dim")] if strict else []
    if reader.obj is None:
        needs.append(("heads",) if reader.text.get("kv_lora_rank") is None else ())
    for group in needs:
        if group and all(reader.explicit(q)[0] is None for q in group):
            names = [KEY_ALIASES[q][0] for q in group]
            aliases = [a for q in group for a in KEY_ALIASES[q][1:]]
            missing.append(f"{' or '.join(names)} (or one of {', '.join(aliases)})")
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
        hidden, hidden_key = getattr(reader.obj, "hidden_size", None), f"default of {type(reader.obj).__name__}"
    obj_dim = getattr(reader.obj, "head_dim", None) if reader.obj is not None else None
    if isinstance(obj_dim, int) and (hidden is None or not heads or obj_dim != hidden // heads):
        reader.note("head_dim", obj_dim, f"default of {type(reader.obj).__name__}")
        return obj_dim
    if hidden is None or not heads:
        raise PlaygroundError("The config lacks head_dim, and hidden_size / num_attention_heads to derive it.")
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
            reader.note("KV heads", heads, "num_attention_heads: transformers caches Falcon K/V broadcast to all heads")
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
        reader.note("layer kinds", _summarize(kinds, windows), f"as transformers derives them ({type(reader.obj).__name__})")
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
    for kind, window in zip(kinds, windows):
        label = f"{kind} (window {window})" if window else kind
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n} × {label}" for label, n in counts.items())
