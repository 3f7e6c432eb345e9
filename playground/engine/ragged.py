"""One forward over many sequences at once: the attention and cache behind continuous batching.

An iteration of the batcher (engine/batcher.py) packs the new tokens of every scheduled sequence
(one decode token each, or a chunk of a prompt) into one row, input_ids (1, T), each token at its
own position. The model's linear layers, the part that reads every weight, then run once for all
T tokens: the reason batching pays on memory-bound decoding. Attention stays per sequence:

- Each layer's new keys and values go to every sequence's OWN cache (the GrowableLayer
  DynamicCache its KV store entry holds, engine/cache.py; `RaggedCache` makes room in each):
  nothing is gathered or copied, and a sequence leaves the batch with its cache as it would be
  after a plain forward.
- `ragged_attention` (registered as the attention implementation "playground_ragged") writes
  each sequence's new keys and values into its own buffers and runs one scaled-dot-product
  attention per sequence over its own keys: causal within the new tokens, all earlier ones
  visible. Without a plan (any other call) it is transformers' sdpa.
- A sliding-window layer (Gemma 3: five of every six layers, window 512) keeps transformers' own
  `DynamicSlidingWindowLayer` in each sequence's cache (its last window - 1 keys, what a plain
  forward keeps, so the KV bytes stay the formula's): `attend_window` attends each sequence's new
  queries over those keys and its new ones under the same mask transformers builds (a key at most
  window - 1 positions back), then keeps the last window - 1. Each request gets the tokens it gets
  alone (tests/test_gemma.py).

The per-sequence loop of one layer is ONE TorchScript call (`attend_segments`), not a dozen
Python-level torch calls per sequence. Every torch call releases Python's GIL and takes it back,
and with the app's other threads busy (Gradio's event loop, the handlers) taking it back waits for
them. bench/bench_ragged.py: 1.1x faster idle, 1.0-1.7x beside two busy Python threads.

The batcher runs a weight-sharing twin of the model with this attention (engine/probes.py
shared_weights_copy), so the engine's own model and every other forward keep theirs; no
`is_causal` flag is ever passed (the flag transformers' own continuous batching sets on the
shared config, which turned concurrent plain forwards non-causal when we measured it).
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.cache_utils import Cache, get_layer_types_and_kwargs
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from playground.engine.cache import GrowableLayer
from playground.engine.model_call import ModelInputs
from playground.messages import Message

logger = logging.getLogger(__name__)
IMPLEMENTATION = "playground_ragged"
NO_MASK = torch.zeros(1, 1, 0, 0, dtype=torch.bool)  # a 4D mask: transformers then builds none


@dataclass(frozen=True)
class Segment:
    """One sequence's tokens in the packed row: [start, stop), appended to `cache`. rows > 1: a cache
    of that many rows (a beam search's), which takes one token per row: stop - start == rows."""

    start: int
    stop: int
    cache: Any  # the sequence's own DynamicCache (GrowableLayers; sliding-window layers as transformers')
    rows: int = 1

    @property
    def advance(self) -> int:
        """Positions each of its cache's rows moves on."""
        return 1 if self.rows > 1 else self.stop - self.start


@dataclass(frozen=True)
class RaggedPlan:
    """Which packed tokens belong to which sequence (one iteration)."""

    segments: tuple[Segment, ...]
    starts: list[int] = field(init=False, compare=False)  # each segment's first packed token
    counts: list[int] = field(init=False, compare=False)  # its tokens (the scripted call's lists)
    rows: list[int] = field(init=False, compare=False)  # its cache's rows

    def __post_init__(self) -> None:
        object.__setattr__(self, "starts", [seg.start for seg in self.segments])
        object.__setattr__(self, "counts", [seg.stop - seg.start for seg in self.segments])
        object.__setattr__(self, "rows", [seg.rows for seg in self.segments])


class RaggedCache(Cache):
    """The cache the packed forward sees: each layer's update makes room in every sequence's own
    cache; ragged_attention then writes the new keys and values there and attends."""

    def __init__(self, plan: RaggedPlan) -> None:
        super().__init__(layers=[])
        self.plan = plan

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """key_states (1, kv_heads, T, head_dim): room for each segment's tokens in its own layer."""
        for seg in self.plan.segments:
            layer = seg.cache.layers[layer_idx]
            if isinstance(layer, GrowableLayer):
                layer.make_room(key_states, value_states, seg.advance)
            elif getattr(layer, "is_sliding", False):  # attend_window appends to it
                if not layer.is_initialized:
                    layer.lazy_initialization(key_states, value_states)
            else:
                raise TypeError(
                    f"the batched attention needs GrowableLayer or sliding-window caches, got "
                    f"{type(layer).__name__}"
                )
        return key_states, value_states  # the new ones: ragged_attention writes them

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # never used: every token's position is given


def ragged_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    ragged: RaggedPlan | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """query (1, heads, T, head_dim) packed; each segment attends over its own cache's keys.
    Returns (1, T, heads, head_dim) as transformers' attention functions do."""
    if ragged is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    layers = [seg.cache.layers[module.layer_idx] for seg in ragged.segments]
    window = kwargs.get("sliding_window")
    if window:
        return attend_window(query, key, value, layers, ragged.segments, int(window), scaling), None
    keys = [layer.buffers[0] for layer in layers]
    values = [layer.buffers[1] for layer in layers]
    lengths = [layer.length for layer in layers]
    attend = _attend()
    out = attend(query, key, value, keys, values, ragged.starts, ragged.counts, ragged.rows, lengths, scaling)
    for layer, seg in zip(layers, ragged.segments, strict=True):
        layer.length += seg.advance  # attend_segments wrote its keys and values
    return out, None


def attend_segments(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    key_buffers: list[torch.Tensor],
    value_buffers: list[torch.Tensor],
    starts: list[int],
    counts: list[int],
    rows: list[int],
    lengths: list[int],
    scale: float | None,
) -> torch.Tensor:
    """One layer of the packed forward: segment i's new keys and values (packed tokens starts[i] ..
    + counts[i]) written into its buffers after its lengths[i] cached ones, then its queries
    attend over all of them, causal among the new ones. A segment of rows[i] > 1 rows (beams) has
    one token per row, each attending over its own row. (1, T, heads, head_dim)."""
    outputs: list[torch.Tensor] = []
    for i in range(len(starts)):
        start, n, before = starts[i], counts[i], lengths[i]
        if rows[i] > 1:  # (1, heads, rows, dim) -> (rows, heads, 1, dim): a row's token is its own query
            key_buffers[i][:, :, before : before + 1] = key[:, :, start : start + n].transpose(0, 2)
            value_buffers[i][:, :, before : before + 1] = value[:, :, start : start + n].transpose(0, 2)
            q = query[:, :, start : start + n].transpose(0, 2)
            keys, values = key_buffers[i][:, :, : before + 1], value_buffers[i][:, :, : before + 1]
            out = F.scaled_dot_product_attention(q, keys, values, scale=scale, enable_gqa=True)
            outputs.append(out.transpose(0, 2))
            continue
        total = before + n
        key_buffers[i][:, :, before:total] = key[:, :, start : start + n]
        value_buffers[i][:, :, before:total] = value[:, :, start : start + n]
        keys, values = key_buffers[i][:, :, :total], value_buffers[i][:, :, :total]
        q = query[:, :, start : start + n]
        mask: torch.Tensor | None = None
        if n > 1 and before > 0:  # a later chunk: every earlier token, causal among the new ones
            positions = torch.arange(total, device=q.device)
            mask = positions[None, :] <= positions[before:, None]
        causal = n > 1 and before == 0  # a first chunk: plain causal; one new token sees everything
        out = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=True
        )
        outputs.append(out)
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous()


def attend_window(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layers: list[Any],
    segments: tuple[Segment, ...],
    window: int,
    scale: float | None,
) -> torch.Tensor:
    """One sliding-window layer of the packed forward: each segment's queries attend over its layer's
    kept keys and its new ones, none further back than window - 1 positions (transformers' sliding
    mask); the layer then keeps the last window - 1 (as DynamicSlidingWindowLayer.update does).
    (1, T, heads, head_dim)."""
    outputs: list[torch.Tensor] = []
    for layer, seg in zip(layers, segments, strict=True):
        q, k, v = (t[:, :, seg.start : seg.stop] for t in (query, key, value))
        if seg.rows > 1:  # (1, heads, rows, dim) -> (rows, heads, 1, dim): a row's token is its own query
            q, k, v = (t.transpose(0, 2) for t in (q, k, v))
        kept = layer.keys.shape[-2] if layer.keys.dim() == 4 else 0  # before any token: an empty 1-D tensor
        keys = torch.cat([layer.keys, k], dim=-2) if kept else k
        values = torch.cat([layer.values, v], dim=-2) if kept else v
        mask = window_mask(kept, q.shape[-2], window, q.device)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale, enable_gqa=True)
        outputs.append(out.transpose(0, 2) if seg.rows > 1 else out)
        layer.keys, layer.values = keys[:, :, -window + 1 :], values[:, :, -window + 1 :]
        layer.cumulative_length += seg.advance
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous()


def window_mask(kept: int, new: int, window: int, device: torch.device) -> torch.Tensor | None:
    """Which of kept + new keys each of the new queries sees (new, kept + new): itself, the keys before
    it, at most window - 1 back. None for one new token (kept <= window - 1: it sees every key)."""
    if new == 1:
        return None
    keys = torch.arange(kept + new, device=device)
    queries = keys[kept:, None]
    return (keys[None, :] <= queries) & (keys[None, :] > queries - window)


@cache
def _attend() -> Callable[..., torch.Tensor]:
    """attend_segments compiled by TorchScript (see the module docstring; torch marks it deprecated
    in favour of torch.compile, which needs a C++ toolchain at run time), or as it is if it cannot be."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.script(attend_segments)
    except Exception as exc:  # a torch without TorchScript: the same function, slower
        logger.warning("Batched attention runs as Python (TorchScript failed: %s): slower in a crowd.", exc)
        return attend_segments


def warm_attention() -> None:
    """Compile the batched attention now (a batcher is made), not in the first request's iteration."""
    _attend()


def full_attention_reason(model: Any, layer_kinds: tuple[str, ...] = ("full_attention",)) -> str | None:
    """Why a forward with given positions and a 4D mask over caches of these layer kinds cannot run
    this model (None: it can): what the batched attention (full and sliding-window layers) and the
    static path (full attention only) both need."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        return Message("attention.encoder_decoder", "encoder-decoder models are not supported")
    attention = getattr(config, "_attn_implementation", None)
    if attention not in ("sdpa", "eager", IMPLEMENTATION):
        return Message(
            "attention.implementation",
            "attention implementation {name!r} (needs sdpa or eager)",
            name=attention,
        )
    devices = set(getattr(model, "hf_device_map", {}).values())
    if len(devices) > 1:
        return Message("attention.spread", "the model is spread over {n} devices", n=len(devices))
    layer_types, _ = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    other = sorted(set(layer_types) - set(layer_kinds))
    if other:
        return Message(
            "attention.layers",
            "layers of type {other} (supported: {kinds})",
            other=", ".join(other),
            kinds=", ".join(layer_kinds),
        )
    wanted = {"input_ids", "position_ids", "attention_mask", "past_key_values"}
    if not wanted <= set(inspect.signature(model.forward).parameters):
        return Message(
            "attention.forward",
            "the model's forward does not take position ids, a 4D mask and a cache",
        )
    return None


def unsupported(model: Any) -> str | None:
    """Why this model cannot be batched this way (None: it can)."""
    # full or sliding-window attention everywhere, positions and a 4D mask taken
    reason = full_attention_reason(model, ("full_attention", "sliding_attention"))
    if reason:
        return reason
    config = getattr(model, "config", None)
    for name in ("attn_logit_softcapping", "use_sinks"):  # ragged_attention implements neither
        if getattr(getattr(config, "get_text_config", lambda: config)(), name, None):
            return Message(
                "attention.unimplemented",
                "its attention uses {name}, which the batched attention does not implement",
                name=name,
            )
    layers = [
        m for m in model.modules() if type(m).__name__.endswith("Attention") and hasattr(m, "layer_idx")
    ]
    return (
        None
        if layers
        else Message(
            "attention.no_index",
            "its attention layers do not say their layer index",
        )
    )


@dataclass(frozen=True)
class PackedPart:
    """One sequence's share of an iteration: its cache, its new ids at their positions, the offsets
    (in ids) whose next-token rows it wants, and its cache's rows (beams: one id per row)."""

    cache: Any
    ids: list[int]
    positions: list[int]
    keep: range
    rows: int = 1


def packed_inputs(parts: list[PackedPart], device: torch.device) -> ModelInputs:
    """The iteration's one forward: every part's ids packed in one row (1, T), each at its own
    position, attending over its own cache (ragged_attention); the kept rows in part order."""
    ids: list[int] = []
    positions: list[int] = []
    segments: list[Segment] = []
    keep: list[int] = []
    for part in parts:
        start = len(ids)
        segments.append(Segment(start, start + len(part.ids), part.cache, part.rows))
        keep.extend(start + offset for offset in part.keep)
        ids.extend(part.ids)
        positions.extend(part.positions)
    plan = RaggedPlan(tuple(segments))
    return ModelInputs(
        ids=torch.tensor([ids], device=device),
        positions=torch.tensor([positions], device=device),
        cache=RaggedCache(plan),
        mask=NO_MASK.to(device),
        keep=torch.tensor(keep or [0], device=device),
        options={"ragged": plan},
    )


AttentionInterface.register(IMPLEMENTATION, ragged_attention)
AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)
