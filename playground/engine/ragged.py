"""One forward over many sequences at once: the attention and cache behind continuous batching.

An iteration of the batcher (engine/batcher.py) packs the new tokens of every scheduled sequence
(one decode token each, or a chunk of a prompt) into one row, input_ids (1, T), each token at its
own position. The model's linear layers, the part that reads every weight, then run once for all
T tokens: the reason batching pays on memory-bound decoding. Attention stays per sequence:

- `RaggedCache` hands each layer's new keys and values to every sequence's OWN cache (the
  GrowableLayer DynamicCache its KV store entry holds, engine/cache.py): nothing is gathered or
  copied, and a sequence leaves the batch with its cache as it would be after a plain forward.
- `ragged_attention` (registered as the attention implementation "playground_ragged") runs one
  scaled-dot-product attention per sequence over its own keys: causal within the new tokens, all
  earlier ones visible. Without a plan (any other call) it is transformers' sdpa.

The batcher runs a weight-sharing twin of the model with this attention (engine/probes.py
shared_weights_copy), so the engine's own model and every other forward keep theirs; no
`is_causal` flag is ever passed (the flag transformers' own continuous batching sets on the
shared config, which turned concurrent plain forwards non-causal when we measured it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.cache_utils import Cache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

IMPLEMENTATION = "playground_ragged"
NO_MASK = torch.zeros(1, 1, 0, 0, dtype=torch.bool)  # a 4D mask: transformers then builds none


@dataclass(frozen=True)
class Segment:
    """One sequence's tokens in the packed row: [start, stop), appended to `cache`."""

    start: int
    stop: int
    cache: Any  # the sequence's own DynamicCache (full-attention GrowableLayers)


@dataclass(frozen=True)
class RaggedPlan:
    """Which packed tokens belong to which sequence (one iteration)."""

    segments: tuple[Segment, ...]


class RaggedCache(Cache):
    """The cache the packed forward sees: each layer's update goes to every sequence's own cache."""

    def __init__(self, plan: RaggedPlan) -> None:
        super().__init__(layers=[])
        self.plan = plan

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """key_states (1, kv_heads, T, head_dim): each segment's slice appended to its own cache."""
        for seg in self.plan.segments:
            layer = seg.cache.layers[layer_idx]
            layer.update(key_states[:, :, seg.start : seg.stop], value_states[:, :, seg.start : seg.stop])
        return key_states, value_states  # unused: ragged_attention reads each sequence's own cache

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
    outputs = []
    for seg in ragged.segments:
        layer = seg.cache.layers[module.layer_idx]
        q = query[:, :, seg.start : seg.stop]
        new, total = q.shape[2], layer.keys.shape[2]
        mask, causal = None, False
        if new == total and new > 1:  # the first chunk of a prompt: plain causal
            causal = True
        elif new > 1:  # a later chunk: every earlier token, causal among the new ones
            positions = torch.arange(total, device=q.device)
            mask = positions[None, :] <= positions[total - new :, None]
        outputs.append(
            F.scaled_dot_product_attention(
                q, layer.keys, layer.values, attn_mask=mask, is_causal=causal, scale=scaling, enable_gqa=True
            )
        )
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


def unsupported(model: Any) -> str | None:
    """Why this model cannot be batched this way (None: it can)."""
    from playground.engine.static import unsupported_reason

    reason = unsupported_reason(model)  # full attention everywhere, positions and a 4D mask taken
    if reason:
        return reason
    config = getattr(model, "config", None)
    for name in ("attn_logit_softcapping", "use_sinks"):  # ragged_attention implements neither
        if getattr(getattr(config, "get_text_config", lambda: config)(), name, None):
            return f"its attention uses {name}, which the batched attention does not implement"
    layers = [
        m for m in model.modules() if type(m).__name__.endswith("Attention") and hasattr(m, "layer_idx")
    ]
    return None if layers else "its attention layers do not say their layer index"


AttentionInterface.register(IMPLEMENTATION, ragged_attention)
AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)
