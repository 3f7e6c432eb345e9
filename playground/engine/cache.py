"""KV caches the engine keeps between calls: appends without copying, crops without copying.

transformers' `DynamicLayer` concatenates on every append, so one decode step copies the
whole cache (at 4,000 tokens that is most of a step's cost on a CPU). `GrowableLayer` keeps
its keys and values in a buffer with spare room: an append writes in place, a crop (undo)
only moves the length back, and the buffer grows by half again when full (amortised O(1)).
Attention reads views of the filled part, so the numbers are the same as DynamicCache's.

Layers of other kinds (sliding windows, linear attention) keep transformers' own classes.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

GROWTH = 1.5  # a full buffer grows to this many times the length it needs
MIN_ROOM = 64  # tokens of spare room at least, so short decodes never reallocate


class GrowableLayer(DynamicLayer):
    """A full-attention layer whose buffers (batch, heads, capacity, head_dim) have spare room.

    `keys` and `values` are always views of the first `length` positions, as DynamicLayer's
    tensors are, so everything that reads a DynamicCache reads this one the same way."""

    length = 0  # positions filled
    _key_buffer: torch.Tensor | None = None
    _value_buffer: torch.Tensor | None = None

    @property
    def keys(self) -> torch.Tensor | None:  # type: ignore[override]
        """A view of the filled positions, made when read: the batched attention (engine/ragged.py)
        writes many sequences' buffers in one call and then only moves their lengths."""
        return None if self._key_buffer is None else self._key_buffer[:, :, : self.length]

    @keys.setter
    def keys(self, tensor: torch.Tensor | None) -> None:  # transformers sets them (None on reset)
        self._key_buffer = tensor
        self.length = 0 if tensor is None else tensor.shape[-2]

    @property
    def values(self) -> torch.Tensor | None:  # type: ignore[override]
        return None if self._value_buffer is None else self._value_buffer[:, :, : self.length]

    @values.setter
    def values(self, tensor: torch.Tensor | None) -> None:
        self._value_buffer = tensor
        self.length = 0 if tensor is None else tensor.shape[-2]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self._key_buffer = key_states.new_empty((*key_states.shape[:2], 0, key_states.shape[-1]))
        self._value_buffer = value_states.new_empty((*value_states.shape[:2], 0, value_states.shape[-1]))
        self.length = 0
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.make_room(key_states, value_states, key_states.shape[-2])
        new_length = self.length + key_states.shape[-2]
        self._key_buffer[:, :, self.length : new_length] = key_states
        self._value_buffer[:, :, self.length : new_length] = value_states
        self.length = new_length
        return self.keys, self.values

    @property
    def capacity(self) -> int:
        return self._key_buffer.shape[-2]

    @property
    def buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The key and value buffers, spare room included (the batched attention writes into them)."""
        return self._key_buffer, self._value_buffer

    def make_room(self, key_states: torch.Tensor, value_states: torch.Tensor, tokens: int) -> None:
        """Started from these states' shape when new, and room for `tokens` more positions."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.reserve(tokens)

    def reserve(self, tokens: int) -> None:
        """Room for `tokens` more positions (grown, with spare room, when there is not)."""
        if self.length + tokens > self.capacity:
            self._grow(self.length + tokens)

    def _grow(self, needed: int) -> None:
        """Copy the filled part into larger buffers (the only copy an append ever makes)."""
        room = max(int(needed * GROWTH), needed + MIN_ROOM) if self.length else needed
        for name in ("_key_buffer", "_value_buffer"):
            old = getattr(self, name)
            new = old.new_empty((*old.shape[:2], room, old.shape[-1]))
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last tokens (a negative count, as transformers 5 takes it): no copy."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative number of tokens to remove, got {tokens_to_remove}")
        if self.is_initialized and tokens_to_remove:
            self.length = max(0, self.length + tokens_to_remove)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Rows for beam search, in place: row i becomes old row beam_idx[i]."""
        if self.get_seq_length() > 0:
            index = beam_idx.to(self.device)
            for buffer in (self._key_buffer, self._value_buffer):
                buffer[:, :, : self.length] = buffer[:, :, : self.length].index_select(0, index)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            self._key_buffer = self.keys.repeat_interleave(repeats, dim=0)
            self._value_buffer = self.values.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            self._key_buffer = self.keys[indices, ...]
            self._value_buffer = self.values[indices, ...]

    def reset(self) -> None:
        self.length = 0
        super().reset()

    def copy(self) -> GrowableLayer:
        """An independent layer holding the same filled positions (a fork)."""
        twin = GrowableLayer()
        if self.is_initialized:
            twin.lazy_initialization(self.keys, self.values)
            twin.update(self.keys, self.values)
        return twin

    def storage_bytes(self) -> int:
        """Bytes allocated, spare room included (what the KV store bounds)."""
        if not self.is_initialized:
            return 0
        return sum(b.untyped_storage().nbytes() for b in (self._key_buffer, self._value_buffer))


def new_cache(config: Any) -> DynamicCache:
    """A DynamicCache for this model whose full-attention layers are GrowableLayers (built through
    the public DynamicCache(config=...), so sliding-window and linear layers stay as transformers
    makes them)."""
    cache = DynamicCache(config=config)
    if not cache.layers:  # a config transformers cannot type: every layer is full attention
        text = config.get_text_config(decoder=True)
        cache.layers = [GrowableLayer() for _ in range(int(text.num_hidden_layers))]
        cache.layer_class_to_replicate = None
        return cache
    cache.layers = [GrowableLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def copy_cache(cache: Any) -> Any:
    """An independent copy of a cache (fork a sequence: the prefix is copied, nothing shared). A
    cache with its own `fork()` (a quantized one, engine/kv_quant.py) copies itself."""
    fork = getattr(cache, "fork", None)
    if callable(fork):
        return fork()
    twin = DynamicCache()
    twin.layer_class_to_replicate = None
    twin.layers = [
        layer.copy() if isinstance(layer, GrowableLayer) else _copied(layer) for layer in cache.layers
    ]
    return twin


def _copied(layer: Any) -> Any:
    return copy.deepcopy(layer)


def storage_bytes(cache: Any) -> int:
    """Bytes a cache holds in memory, spare room included (0 for None)."""
    if cache is None:
        return 0
    total = 0
    for layer in getattr(cache, "layers", []):
        if isinstance(layer, GrowableLayer):
            total += layer.storage_bytes()
            continue
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(tensor, torch.Tensor):
                total += tensor.untyped_storage().nbytes()
    return total


def filled_layer_bytes(cache: Any) -> list[int]:
    """Bytes of the filled keys and values per layer: Σ numel × element_size (what the KV formula
    predicts; spare room excluded)."""
    cache = getattr(cache, "self_attention_cache", cache)  # EncoderDecoderCache: the decoder's own cache
    sizes = []
    for layer in cache.layers:
        tensors = (getattr(layer, "keys", None), getattr(layer, "values", None))
        sizes.append(sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "numel")))
    return sizes
