"""Preallocated KV slots: the static cache under the static decode path (see engine/static.py).

A slot holds the keys and values of `rows` sequences of up to `capacity` tokens for every layer,
in two tensors allocated once, (layers, rows, kv_heads, capacity, head_dim). The model reads
them through `SlotCache`, a transformers `Cache` whose layers write the new keys and values at
the slot's write positions (in place) and hand attention the first `kv_length` positions. The
attention mask is computed on the device from the positions, so a one-token step has fixed
shapes and fixed addresses for a given (rows, bucket): what a CUDA graph needs. On CUDA each
(rows, bucket) step is captured once and replayed; elsewhere the very same step runs eagerly,
so the CPU tests run the code the graphs record.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from playground.kv.geometry import model_dims

# (input_ids (rows, q), position_ids (rows, q), mask (rows, 1, q, kv), cache, keep)
#     -> logits (rows, keep, vocab)
ModelCall = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Cache, int], torch.Tensor]


def bucket_lengths(capacity: int, smallest: int) -> tuple[int, ...]:
    """Attention lengths a decode step may read: doubling from `smallest`, ending at capacity."""
    if capacity < 1 or smallest < 1:
        raise ValueError(f"capacity and smallest bucket must be >= 1, got {capacity} and {smallest}")
    sizes, size = [], smallest
    while size < capacity:
        sizes.append(size)
        size *= 2
    return (*sizes, capacity)


def graph_row_counts(rows: int) -> tuple[int, ...]:
    """Batch sizes that get a graph (powers of two, then rows): other sizes run padded up."""
    counts, count = [], 1
    while count < rows:
        counts.append(count)
        count *= 2
    return (*counts, rows)


@dataclass(frozen=True)
class KVShape:
    """The per-layer key/value geometry of a decoder-only model (every layer full attention)."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, model: Any, device: torch.device) -> KVShape:
        dims = model_dims(model.config)
        dtype = model.get_input_embeddings().weight.dtype
        return cls(dims.layers, dims.kv_heads, dims.head_dim, dtype, device)

    def bytes_per_token(self) -> int:
        """Keys + values of one token over all layers."""
        element = torch.tensor([], dtype=self.dtype).element_size()
        return 2 * self.layers * self.kv_heads * self.head_dim * element


@dataclass
class SlotView:
    """What the next forward reads and writes; set before each forward (and baked into a graph)."""

    rows: int
    kv_length: int  # positions attention reads (the filled part, or a step's bucket)
    write_index: torch.Tensor  # (q,) positions the new keys and values go to


class SlotLayer(CacheLayerMixin):
    """One layer of a slot as transformers sees it: keys/values (rows, kv_heads, capacity, dim)."""

    is_compileable = True

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, view: SlotView) -> None:
        super().__init__()
        self.keys, self.values, self.view = keys, values, view
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Nothing to do: the buffers exist before the first forward."""

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        view = self.view
        keys, values = self.keys[: view.rows], self.values[: view.rows]
        keys.index_copy_(2, view.write_index, key_states)  # in place: the addresses never change
        values.index_copy_(2, view.write_index, value_states)
        return keys[:, :, : view.kv_length], values[:, :, : view.kv_length]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.view.kv_length, 0

    def get_seq_length(self) -> int:
        return self.view.kv_length

    def get_max_length(self) -> int:
        return int(self.keys.shape[2])


class SlotCache(Cache):
    """The transformers Cache over one slot's layers (the model gets a 4D mask with it)."""

    def __init__(self, layers: list[SlotLayer]) -> None:
        super().__init__(layers=layers)


class Slot:
    """KV buffers for `rows` sequences of up to `capacity` tokens, with the static inputs, output
    and captured graphs of its one-token steps. `owner` is a weak reference to whoever uses the
    rows (a sequence or a beam batch): when it dies the slot is free."""

    def __init__(
        self,
        shape: KVShape,
        rows: int,
        capacity: int,
        vocab: int,
        *,
        buckets: Sequence[int],
        additive_mask: bool,
    ) -> None:
        device = shape.device
        self.rows, self.capacity, self.device = rows, capacity, device
        self.buckets, self.graph_rows = tuple(buckets), graph_row_counts(rows)
        dims = (shape.layers, rows, shape.kv_heads, capacity, shape.head_dim)
        self.keys = torch.zeros(dims, dtype=shape.dtype, device=device)
        self.values = torch.zeros(dims, dtype=shape.dtype, device=device)
        self.input_ids = torch.zeros((rows, 1), dtype=torch.long, device=device)  # a step's tokens
        self.positions = torch.zeros((rows, 1), dtype=torch.long, device=device)  # a step's position
        self.logits = torch.zeros((rows, vocab), dtype=torch.float32, device=device)  # a step's scores
        self.kv_arange = torch.arange(capacity, device=device)
        self.mask_dtype = shape.dtype if additive_mask else None  # eager attention adds a float mask
        self.view = SlotView(rows, 1, self.positions[0])
        layers = [SlotLayer(self.keys[i], self.values[i], self.view) for i in range(shape.layers)]
        self.cache = SlotCache(layers)
        self.graphs: dict[tuple[int, int], Any] = {}  # (rows, bucket) -> torch.cuda.CUDAGraph
        self.owner: weakref.ref[Any] | None = None
        self.used = 0  # when it was last used (the decoder's clock), for least-recently-used reuse

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values, self.logits))

    def holder(self) -> Any:
        """Who uses the rows now (None: free)."""
        return self.owner() if self.owner is not None else None

    def rows_of(self, first: int, last: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of rows [first, last) up to `length` tokens: (layers, rows, kv_heads, length, dim)."""
        return self.keys[:, first:last, :, :length], self.values[:, first:last, :, :length]

    def mask(self, positions: torch.Tensor, kv_length: int) -> torch.Tensor:
        """(rows, 1, q, kv_length): query at position p reads keys 0..p (all on the device)."""
        allowed = self.kv_arange[:kv_length].view(1, 1, 1, kv_length) <= positions[:, None, :, None]
        if self.mask_dtype is None:
            return allowed
        zeros = torch.zeros(allowed.shape, dtype=self.mask_dtype, device=self.device)
        return zeros.masked_fill(~allowed, torch.finfo(self.mask_dtype).min)

    def step_body(self, call: ModelCall, rows: int, bucket: int) -> None:
        """One token per row from self.input_ids at self.positions, scores into self.logits. This is
        what a graph records: fixed shapes, and every tensor it touches keeps its address."""
        positions = self.positions[:rows]  # (rows, 1)
        self.view.rows, self.view.kv_length, self.view.write_index = rows, bucket, self.positions[0]
        logits = call(self.input_ids[:rows], positions, self.mask(positions, bucket), self.cache, 1)
        self.logits[:rows].copy_(logits[:, -1])

    def step(self, call: ModelCall, tokens: torch.Tensor | int, position: int, rows: int) -> torch.Tensor:
        """Append one token to each of the first `rows` rows, all at `position`: scores (rows, vocab)
        float32, a copy (the next step overwrites the slot's output). Replays the captured graph for
        (rows padded up to a graph size, the smallest bucket that holds position + 1)."""
        run_rows = next(r for r in self.graph_rows if r >= rows)
        bucket = next(b for b in self.buckets if b > position)
        if isinstance(tokens, int):
            self.input_ids[0, 0].fill_(tokens)  # a kernel with the id as argument: no host copy
        else:
            self.input_ids[:rows, 0].copy_(tokens)
        self.positions[:run_rows].fill_(position)
        graph = self.graphs.get((run_rows, bucket))
        if graph is not None:
            graph.replay()
        else:
            self.step_body(call, run_rows, bucket)
        return self.logits[:rows].clone()

    def capture(self, call: ModelCall, rows: int, bucket: int, pool: Any) -> None:
        """Record the (rows, bucket) step as a CUDA graph (its memory from the shared pool)."""
        self.positions.zero_()
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            self.step_body(call, rows, bucket)  # once eagerly first: library handles, lazy kernels
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            self.step_body(call, rows, bucket)
        self.graphs[(rows, bucket)] = graph

    def graph_jobs(self) -> list[tuple[int, int]]:
        """Every (rows, bucket) step this slot captures."""
        return [(rows, bucket) for rows in self.graph_rows for bucket in self.buckets]
