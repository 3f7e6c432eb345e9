"""What each decoder layer caches per token: KV heads, key and value sizes, windows, MLA latents,
in two modes (see playground/kv/__init__.py)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from playground.errors import PlaygroundError
from playground.kv.config import KEY_ALIASES, NO_CACHE_TYPES, as_config_dict, build_config_object, text_dict
from playground.messages import Message

MODES = ("ideal", "transformers")
# A layer's kind as people read it (the formula, the per-layer table): translatable words.
KIND_NAMES = {
    "full": Message("kv.kind.full", "full"),
    "sliding": Message("kv.kind.sliding", "sliding"),
    "chunked": Message("kv.kind.chunked", "chunked"),
    "mla": Message("kv.kind.mla", "MLA"),
    "none": Message("kv.kind.none", "none"),
}
# The quantities of "Where the numbers come from" (a config key's own name is never translated).
KV_HEADS = Message("kv.quantity.kv_heads", "KV heads")
LAYER_KINDS = Message("kv.quantity.layer_kinds", "layer kinds")
ATTENTION_HEADS = Message("kv.quantity.heads", "attention heads")
HIDDEN_SIZE = Message("kv.quantity.hidden", "hidden size")

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
    # quantities and rules are Messages (a UI says them in its language), config keys plain str
    notes: tuple[str, ...] = ()
    context_limit: int | None = None  # the model's own longest context (max_position_embeddings)

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
class ConfigReader:
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
                    value, key = getattr(self.obj, name), default_of(self.obj)
                    break
        if value is not None:
            self.note(label, value, key or "")
        return value

    def note(self, label: str, value: Any, source: str) -> None:
        self.sources.append((label, value if isinstance(value, Message) else str(value), source))


def default_of(obj: Any) -> Message:
    """Where a value came from when the config does not set it: the config class's default."""
    return Message("kv.source.default", "default of {cls}", cls=type(obj).__name__)


def positive_int(value: Any, label: str) -> int:
    """value as an int; label (a config key, or a Message naming the setting) names it in the error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value <= 0:
        raise PlaygroundError(
            "{name} must be a positive whole number, got {value!r}.",
            key="kv.error.not_positive",
            name=label,
            value=value,
        )
    return int(value)


def _require(reader: ConfigReader, strict: bool) -> None:
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
            missing.append(
                Message("kv.error.key_aliases", "{names} (or one of {aliases})", names=names, aliases=aliases)
            )
    if missing:
        where = Message("kv.error.lacks_in", " in {part}", part=reader.prefix[:-1]) if reader.prefix else ""
        raise PlaygroundError(
            "The config lacks the key(s) it needs{where}: {keys}.",
            key="kv.error.lacks_keys",
            where=where,
            keys=missing,
        )


def _head_dim(reader: ConfigReader, heads: int | None) -> int:
    """An explicit head_dim wins over hidden_size / num_attention_heads."""
    value, key = reader.explicit("head_dim")
    if value is not None:
        reader.note("head_dim", value, key or "")
        return positive_int(value, "head_dim")
    hidden, hidden_key = reader.explicit("hidden")
    if hidden is None and reader.obj is not None:
        hidden = getattr(reader.obj, "hidden_size", None)
        hidden_key = default_of(reader.obj)
    obj_dim = getattr(reader.obj, "head_dim", None) if reader.obj is not None else None
    if isinstance(obj_dim, int) and (hidden is None or not heads or obj_dim != hidden // heads):
        reader.note("head_dim", obj_dim, default_of(reader.obj))
        return obj_dim
    if hidden is None or not heads:
        raise PlaygroundError(
            "The config lacks head_dim and hidden_size / num_attention_heads to derive it.",
            key="kv.error.no_head_dim",
        )
    reader.note("head_dim", hidden // heads, f"{hidden_key} / num_attention_heads = {hidden} / {heads}")
    return positive_int(hidden // heads, "head_dim")


def _kv_heads(reader: ConfigReader, heads: int, mode: str) -> int:
    """KV heads: MHA (= heads), GQA (num_key_value_heads), MQA (1, e.g. multi_query); Falcon's own rules."""
    text, family = reader.text, reader.text.get("model_type")
    if family == "falcon" or (reader.obj is not None and type(reader.obj).__name__ == "FalconConfig"):
        return _falcon_kv_heads(reader, heads, mode)
    value = reader.get("kv_heads", KV_HEADS)
    if value is not None:
        return positive_int(value, "num_key_value_heads")
    if text.get("multi_query"):
        reader.note(KV_HEADS, 1, reader.prefix + "multi_query = true (MQA)")
        return 1
    rule = Message("kv.source.mha", "num_attention_heads (no KV-head key: multi-head attention)")
    reader.note(KV_HEADS, heads, rule)
    return heads


def _falcon_kv_heads(reader: ConfigReader, heads: int, mode: str) -> int:
    """Falcon: new_decoder_architecture -> num_kv_heads groups; else multi_query -> 1; else MHA."""
    text = reader.text
    if text.get("new_decoder_architecture"):
        kv = positive_int(reader.explicit("kv_heads")[0] or heads, "num_kv_heads")
        if mode == "transformers":
            rule = Message(
                "kv.source.falcon_every_head",
                "num_attention_heads: transformers caches Falcon K/V for every head",
            )
            reader.note(KV_HEADS, heads, rule)
            return heads
        reader.note(KV_HEADS, kv, reader.prefix + "num_kv_heads (new_decoder_architecture)")
        return kv
    if text.get("multi_query", True):
        rule = Message(
            "kv.source.falcon_mqa", "{key} (Falcon default true: MQA)", key=reader.prefix + "multi_query"
        )
        reader.note(KV_HEADS, 1, rule)
        return 1
    reader.note(KV_HEADS, heads, reader.prefix + "multi_query = false (MHA)")
    return heads


def _kind_of(layer_type: Any) -> str:
    """A layer-type string (transformers' or a family's own) -> full / sliding / chunked / none."""
    name = str(layer_type).lower()
    if "chunk" in name:
        return "chunked"
    if "sliding" in name or "local" in name:
        return "sliding"
    if any(tag in name for tag in NO_CACHE_TYPES) and "hybrid" not in name:
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
        raise PlaygroundError(
            "The config has sliding-window layers but no sliding_window size.", key="kv.error.no_window"
        )
    return kinds, windows


def _gpt_neo_local(obj_or_text: Any, kinds: list[str], windows: list[int | None]) -> None:
    """GPT-Neo marks local layers in attention_layers; an efficient engine keeps only window_size there."""
    get = obj_or_text.get if isinstance(obj_or_text, dict) else lambda k: getattr(obj_or_text, k, None)
    layers, window = get("attention_layers"), get("window_size")
    if isinstance(layers, list) and window and len(layers) == len(kinds):
        for i, kind in enumerate(layers):
            if kind == "local":
                kinds[i], windows[i] = "sliding", int(window)


def _layer_kinds(reader: ConfigReader, n_layers: int, mode: str) -> tuple[list[str], list[int | None]]:
    found = _types_from_transformers(reader.obj) if reader.obj is not None else None
    if found is not None and len(found[0]) == n_layers:
        kinds, windows = found
        source = Message(
            "kv.source.transformers", "as transformers derives them ({cls})", cls=type(reader.obj).__name__
        )
        reader.note(LAYER_KINDS, _summarize(kinds, windows), source)
    else:
        kinds, windows = _types_from_dict(reader.text, n_layers)
        reader.note(LAYER_KINDS, _summarize(kinds, windows), _kinds_source(reader.text))
    if mode == "ideal":
        _gpt_neo_local(reader.obj if reader.obj is not None else reader.text, kinds, windows)
    return kinds, windows


def _kinds_source(text: dict[str, Any]) -> str:
    for key in ("layer_types", "layers_block_type", "attn_layer_indices", "sliding_window_pattern"):
        if key in text:
            return key
    if text.get("use_sliding_window") is False:
        return Message("kv.source.no_window", "use_sliding_window = false (no window)")
    if _window_value(text):
        return Message("kv.source.window_everywhere", "sliding_window on every layer")
    return Message("kv.source.full", "no sliding_window: full attention")


def _summarize(kinds: list[str], windows: list[int | None]) -> Message:
    """'26 × sliding (window 512), 6 × full', its words translatable."""
    counts: dict[tuple[str, int | None], int] = {}
    for kind, window in zip(kinds, windows, strict=True):
        counts[kind, window] = counts.get((kind, window), 0) + 1
    parts = [
        Message(
            "kv.source.windowed", "{count} × {kind} (window {window})", count=n, kind=KIND_NAMES[k], window=w
        )
        if w
        else Message("kv.source.counted", "{count} × {kind}", count=n, kind=KIND_NAMES[k])
        for (k, w), n in counts.items()
    ]
    return Message("kv.source.kinds", "{kinds}", kinds=parts)


def _mla_dims(reader: ConfigReader) -> tuple[int, int] | None:
    """(kv_lora_rank, qk_rope_head_dim) for Multi-head Latent Attention (DeepSeek-V2/V3), else None."""
    rank = reader.get("kv_lora_rank", Message("kv.quantity.mla_latent", "kv_lora_rank (MLA latent)"))
    if rank is None:
        return None
    rope = reader.get(
        "qk_rope_head_dim", Message("kv.quantity.mla_rope", "qk_rope_head_dim (MLA rotary key)")
    )
    if rope is None:
        raise PlaygroundError(
            "An MLA config (kv_lora_rank set) also needs qk_rope_head_dim.", key="kv.error.mla_rope"
        )
    return positive_int(rank, "kv_lora_rank"), positive_int(rope, "qk_rope_head_dim")


def make_reader(config: Any) -> tuple[ConfigReader, bool]:
    """A reader over the decoder config; the flag says whether the input was a raw dict (check keys)."""
    if not isinstance(config, (str, Mapping)) and hasattr(config, "get_text_config"):
        obj = config.get_text_config(decoder=True)
        return ConfigReader(obj.to_dict(), "", obj), False
    raw = as_config_dict(config)
    text, prefix = text_dict(raw)
    return ConfigReader(text, prefix, build_config_object(raw)), True


def _standard_layers(
    reader: ConfigReader, kinds: list[str], windows: list[int | None], mode: str
) -> list[LayerSpec]:
    """MHA / GQA / MQA layers: kv_heads K and V vectors of head_dim each per token."""
    heads_value = reader.get("heads", ATTENTION_HEADS)
    if heads_value is None:
        raise PlaygroundError(
            "The config lacks num_attention_heads (or n_head, num_heads, n_heads).", key="kv.error.no_heads"
        )
    heads = positive_int(heads_value, "num_attention_heads")
    head_dim = _head_dim(reader, heads)
    kv = _kv_heads(reader, heads, mode)
    if heads % kv:
        raise PlaygroundError(
            "num_attention_heads ({heads}) must be a multiple of the KV heads ({kv}): in grouped-query "
            "attention every KV head serves the same number of query heads.",
            key="kv.error.heads_multiple",
            heads=heads,
            kv=kv,
        )
    return [
        LayerSpec(i, k, kv, head_dim, head_dim, w)
        for i, (k, w) in enumerate(zip(kinds, windows, strict=True))
    ]


def _build_geometry(config: Any, mode: str) -> KVGeometry:
    reader, strict = make_reader(config)
    _require(reader, strict)
    n_layers = positive_int(
        reader.get("layers", Message("kv.quantity.layers", "layers")), "num_hidden_layers"
    )
    kinds, windows = _layer_kinds(reader, n_layers, mode)
    for window in windows:
        if window is not None:
            positive_int(window, "sliding_window")
    mla = _mla_dims(reader)
    if mla is None:
        layers = _standard_layers(reader, kinds, windows, mode)
    else:
        pairs = enumerate(zip(kinds, windows, strict=True))
        layers = [LayerSpec(i, "none" if k == "none" else "mla", 1, mla[0], mla[1], w) for i, (k, w) in pairs]
    model_type = reader.text.get("model_type") or getattr(reader.obj, "model_type", None)
    limit = reader.get("context", Message("kv.quantity.context", "context limit"))
    limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
    notes = _notes(layers, mode)
    return KVGeometry(model_type, mode, tuple(layers), tuple(reader.sources), notes, limit)


def _notes(layers: list[LayerSpec], mode: str) -> tuple[str, ...]:
    notes = []
    if any(layer.kind == "none" for layer in layers):
        notes.append(
            Message(
                "kv.note.no_cache",
                "Layers without attention (linear attention / state-space / shared KV) hold no per-token "
                "cache; their fixed-size recurrent state is not counted here.",
            )
        )
    if mode == "transformers" and any(layer.window for layer in layers):
        notes.append(
            Message(
                "kv.note.window", "transformers' DynamicSlidingWindowLayer keeps the last window - 1 tokens."
            )
        )
    if any(layer.kind == "mla" for layer in layers):
        notes.append(
            Message(
                "kv.note.mla",
                "MLA caches one latent (kv_lora_rank) plus one shared rotary key (qk_rope_head_dim) per "
                "token, for all heads together; transformers caches the same latents.",
            )
        )
    return tuple(notes)


@functools.lru_cache(maxsize=512)
def _geometry_cached(canonical_json: str, mode: str) -> KVGeometry:
    return _build_geometry(json.loads(canonical_json), mode)


def kv_geometry(config: Any, mode: str = "ideal") -> KVGeometry:
    """Per-layer cache geometry from a config.json dict, a JSON string or a transformers config object."""
    if mode not in MODES:
        raise PlaygroundError(
            "Unknown mode {mode!r}: use 'ideal' or 'transformers'.", key="kv.error.mode", mode=mode
        )
    if isinstance(config, (str, Mapping)):
        raw = as_config_dict(config)
        try:
            canonical = json.dumps(raw, sort_keys=True)
        except (TypeError, ValueError):
            return _build_geometry(raw, mode)
        return _geometry_cached(canonical, mode)
    return _build_geometry(config, mode)


@dataclass(frozen=True)
class ModelDims:
    """The sizes the engine and the lessons need (the one reader of a model's shape: this module)."""

    layers: int
    heads: int
    kv_heads: int  # of the first layer with a per-token cache (every layer, for full-attention models)
    head_dim: int
    hidden: int
    intermediate: int  # the MLP's inner size (4 x hidden when the config names none)


def model_dims(config: Any) -> ModelDims:
    """A config's sizes, read by the same rules as the KV geometry (aliases, defaults, transformers'
    own K/V layout)."""
    geometry = kv_geometry(config, "transformers")
    cached = next((layer for layer in geometry.layers if layer.kind != "none"), geometry.layers[0])
    reader, _ = make_reader(config)
    heads = positive_int(reader.get("heads", ATTENTION_HEADS) or cached.kv_heads, "num_attention_heads")
    hidden = reader.get("hidden", HIDDEN_SIZE) or heads * cached.k_dim
    inner = reader.text.get("intermediate_size") or getattr(reader.obj, "intermediate_size", None)
    return ModelDims(
        layers=len(geometry.layers),
        heads=heads,
        kv_heads=cached.kv_heads,
        head_dim=cached.k_dim,
        hidden=positive_int(hidden, "hidden_size"),
        intermediate=positive_int(inner or 4 * hidden, "intermediate_size"),
    )
