"""Bytes that quantized weights and caches really hold, counted on their tensors.

A quantization library keeps its numbers in many places: packed integers as a parameter (HQQ's
`W_q`), scales and zeros in a dict (HQQ's `meta`), or tensor
subclasses whose inner tensors are the data, the scales and the shifts (optimum-quanto's QTensor,
torchao's quantized tensors). `tensors_in` walks all of them down to plain tensors, and
`unique_bytes` sums each storage once (a tied embedding and LM head count once).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
from collections.abc import Iterable, Iterator
from typing import Any

import torch

LIBRARIES = ("hqq", "optimum", "torchao")  # whose plain objects may hold tensors
MAX_DEPTH = 8


def tensors_in(obj: Any, depth: int = 0, seen: set[int] | None = None) -> Iterator[torch.Tensor]:
    """Every plain tensor reachable from obj: modules (parameters, buffers, attributes; children
    not entered), tensor subclasses (their inner tensors), dicts, lists, tuples, library objects."""
    seen = set() if seen is None else seen
    if depth > MAX_DEPTH or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield from _tensor_parts(obj, depth, seen)
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from tensors_in(value, depth + 1, seen)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from tensors_in(value, depth + 1, seen)
    elif isinstance(obj, torch.nn.Module):
        for name, value in vars(obj).items():
            if name != "_modules":  # children are walked by the caller (named_modules)
                yield from tensors_in(value, depth + 1, seen)
    elif _library_object(obj):
        for value in vars(obj).values():
            yield from tensors_in(value, depth + 1, seen)


def _tensor_parts(tensor: torch.Tensor, depth: int, seen: set[int]) -> Iterator[torch.Tensor]:
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is not None and type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        names, _ = flatten()
        if names:  # a wrapper subclass: its inner tensors hold the bytes
            for name in names:
                yield from tensors_in(getattr(tensor, name), depth + 1, seen)
            return
    if tensor.device.type != "meta":
        yield tensor


def _library_object(obj: Any) -> bool:
    module = type(obj).__module__.split(".")[0]
    return module in LIBRARIES and hasattr(obj, "__dict__") and not isinstance(obj, type)


def unique_bytes(tensors: Iterable[torch.Tensor], seen: set[tuple[int, int]] | None = None) -> int:
    """Bytes of the storages behind tensors, each storage once (seen: storages counted already)."""
    seen = set() if seen is None else seen
    total = 0
    for tensor in tensors:
        try:
            storage = tensor.untyped_storage()
            key, size = (storage.data_ptr(), storage.nbytes()), storage.nbytes()
        except (RuntimeError, NotImplementedError):  # no storage of its own: count its elements
            key, size = (id(tensor), -1), tensor.numel() * tensor.element_size()
        if key not in seen:
            seen.add(key)
            total += size
    return total


def filled_bytes(obj: Any) -> int:
    """Σ numel × element_size over the plain tensors of obj (a cache layer's states: what the KV
    formula predicts, spare room never counted)."""
    return sum(t.numel() * t.element_size() for t in tensors_in(obj))


def model_bytes(model: torch.nn.Module, names: set[str] | None = None) -> tuple[int, int]:
    """(bytes of every tensor the model holds, bytes of those held by the modules named in names),
    storages counted once."""
    seen: set[tuple[int, int]] = set()
    total = part = 0
    for name, module in model.named_modules():
        held = unique_bytes(tensors_in(module), seen)
        total += held
        if names is not None and name in names:
            part += held
    return total, part


def release_memory() -> None:
    """Collect garbage and give freed heap pages back to the system (glibc), so the process's
    memory drops once a quantized copy is gone."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)
