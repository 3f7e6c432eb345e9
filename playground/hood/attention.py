"""Attention weights and the causal mask, read live from the loaded model.

    maps = attention_maps(engine, ids)      # (layers, heads, seq, seq), rows sum to 1
    maps[layer, head, query, key]           # 0 above the diagonal: a token never sees the future

The weights come from an eager-attention twin of the model that shares its weights (see
engine/probes.py): the same numbers transformers' `output_attentions=True` gives with eager
attention, while the rest of the app keeps its fast attention. Eager attention keeps
layers × heads × seq² weights, so the length is capped (MAX_TOKENS) to keep the view quick.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.tokens import token_texts
from playground.errors import PlaygroundError
from playground.hood.common import Lesson, require
from playground.messages import Message

MAX_TOKENS = 256  # eager attention over 256 tokens: 30 × 9 × 256² floats = 71 MiB on the embedded model
THUMBNAIL = 24  # thumbnails in the layer × head grid are at most this many cells wide


def attention_maps(
    lm: Engine, ids: Sequence[int], *, max_tokens: int = MAX_TOKENS, control: Control | None = None
) -> torch.Tensor:
    """Attention weights (layers, heads, seq, seq) float32 on the CPU for the token ids: entry
    [l, h, q, k] is how much query position q attends to key position k in layer l, head h."""
    probes = require(lm, "attentions")
    ids = list(ids)
    if not ids:
        raise PlaygroundError(
            "The text is empty: type something to look at.", key="hood.attention.error.empty"
        )
    if len(ids) > max_tokens:
        shape = probes.shape()
        mib = shape.layers * shape.heads * len(ids) ** 2 * 4 / 2**20
        raise PlaygroundError(
            "The attention view reads at most {most} tokens and this text has {tokens}: shorten it. "
            "(Eager attention keeps layers × heads × tokens² weights: {mib:,.0f} MiB here.)",
            key="hood.attention.error.too_long",
            most=max_tokens,
            tokens=len(ids),
            mib=mib,
        )
    return probes.attentions(ids, control)


@dataclass
class AttentionView:
    """What the view draws, from one text."""

    ids: list[int]
    tokens: list[str]  # visible token pieces
    maps: torch.Tensor  # (layers, heads, seq, seq)

    @property
    def layers(self) -> int:
        return self.maps.shape[0]

    @property
    def heads(self) -> int:
        return self.maps.shape[1]

    def sink_share(self) -> torch.Tensor:
        """(layers, heads): mean weight on the first token over queries 2..n (query 1 can only
        look at itself). A large share is the "attention sink": heads with nothing to attend to
        park their weight on the first token."""
        if self.maps.shape[-1] < 2:
            return self.maps[..., 0, 0]
        return self.maps[..., 1:, 0].mean(dim=-1)

    def uniform_share(self) -> float:
        """What sink_share would be if every query spread its weight evenly over the keys it may
        see (1 / (q + 1) on the first token): the baseline a sink stands out from."""
        seq = self.maps.shape[-1]
        return 1.0 if seq < 2 else sum(1 / (q + 1) for q in range(1, seq)) / (seq - 1)

    def query_row(self, layer: int, head: int | None, position: int) -> list[float]:
        """The weights of the token at `position` over every key (later keys are 0: masked);
        head None: the mean over heads."""
        maps = self.maps[layer].mean(dim=0) if head is None else self.maps[layer, head]
        return maps[position].tolist()

    def thumbnails(self, size: int = THUMBNAIL) -> torch.Tensor:
        """(layers, heads, s, s) with s = min(seq, size): each map averaged over blocks of cells,
        the blocks wholly in the future (above the diagonal) NaN, so they are drawn as masked."""
        seq = self.maps.shape[-1]
        pooled = self.maps
        if seq > size:
            flat = self.maps.reshape(-1, 1, seq, seq)
            pooled = torch.nn.functional.adaptive_avg_pool2d(flat, size)
            pooled = pooled.reshape(self.layers, self.heads, size, size)
        side = pooled.shape[-1]
        future = torch.triu(torch.ones(side, side, dtype=torch.bool), diagonal=1)
        return pooled.masked_fill(future, float("nan"))


def run(
    lm: Engine, ids: Sequence[int], *, max_tokens: int = MAX_TOKENS, control: Control | None = None
) -> AttentionView:
    """attention_maps plus the token pieces the figures label."""
    maps = attention_maps(lm, ids, max_tokens=max_tokens, control=control)
    tokens = [text.visible for text in token_texts(lm.tokenizer, ids)]  # byte pieces: '美 (byte 1/3)'
    return AttentionView(list(ids), tokens, maps)


def iter_run(
    lm: Engine, ids: Sequence[int], *, max_tokens: int = MAX_TOKENS, control: Control | None = None
) -> Iterator[AttentionView]:
    """run as a lesson run: one eager forward, then its view."""
    yield (view := run(lm, ids, max_tokens=max_tokens, control=control))
    return view


LESSON = Lesson(
    "attention", Message("hood.attention.title", "Attention and the causal mask"), ("attentions",), iter_run
)
