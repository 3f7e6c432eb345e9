"""Bytes per cached value for every KV dtype the calculator knows (float16 ... llama.cpp q4_0)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from playground.errors import PlaygroundError
from playground.messages import Message

GIB = 2**30  # gibibyte: what nvidia-smi (MiB) and torch report
GB = 10**9  # gigabyte: what GPU vendors print on the box
# A memory size as people type it: 80, 12.5, "12.5 GB", "24 GiB", "1.5 TB", "80 GB · A100-80, H100".
_SIZE = re.compile(
    r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(gb|gib|tb|tib|mb|mib)?\s*(?:·.*)?", re.IGNORECASE | re.DOTALL
)
_UNIT_BYTES = {"gb": GB, "gib": GIB, "tb": 10**12, "tib": 2**40, "mb": 10**6, "mib": 2**20}
GPU_MEMORY = Message("kv.name.gpu_memory", "GPU memory")


def memory_gb(value: Any, label: str = GPU_MEMORY) -> float:
    """A memory size in GB (10^9 B): a number (GB), or text with a unit (GB when none); the error
    names the value and what is allowed."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number, unit = float(value), "gb"
    else:
        match = _SIZE.fullmatch(str(value or ""))
        number, unit = (float(match[1]), (match[2] or "gb").lower()) if match else (0.0, "gb")
    if not 0 < number < float("inf"):
        raise PlaygroundError(
            "{name} must be a positive size in GB (e.g. 80, 12.5 or 12.5 GB; GiB and TB work too), "
            "got {value!r}.",
            key="kv.error.memory",
            name=label,
            value=value,
        )
    return number * _UNIT_BYTES[unit] / GB


# --- dtypes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVDtype:
    """How many bytes a cached vector of n elements takes."""

    name: str
    bits: int  # bits per element (the quantized payload for block formats)
    block: int = 0  # elements per block for block formats (llama.cpp), else 0
    scale_bytes: int = 0  # bytes of the per-block scale (a float16 in q8_0 / q4_0)
    note: str = ""  # a Message: how its bytes come about, said in the page's language
    # transformers' QuantizedCache integer formats: values per group, each group with a scale and a
    # zero in the model's dtype; the values are packed 8 // bits per byte across groups
    group: int = 0
    tensor_scale_bytes: int = 0  # one scale per layer's keys (and one for its values): fp8's float32

    def row_bytes(self, n: int) -> int:
        """Bytes of one vector of `n` elements (one head's key or value for one token; a group
        format's packed values only, its scales are per group: see tensor_bytes)."""
        if self.block:
            blocks = -(-n // self.block)  # a partial last block is stored whole
            return blocks * (self.block * self.bits // 8 + self.scale_bytes)
        return -(-n * self.bits // 8)

    def tensor_bytes(self, rows: int, n: int, scale_bytes: int = 2) -> int:
        """Bytes of one layer's cached keys (or values): `rows` vectors of n values (batch × tokens ×
        KV heads of them), as the cache stores them. A group format holds ⌈groups / (8 / bits)⌉ × group
        bytes of packed values and a scale and a zero of scale_bytes (the model's dtype) per group."""
        if rows <= 0:
            return 0
        if self.group:
            groups = -(-rows * n // self.group)
            return -(-groups // (8 // self.bits)) * self.group + 2 * scale_bytes * groups
        return rows * self.row_bytes(n) + self.tensor_scale_bytes

    def bytes_for(self, elements: int) -> float:
        """Average bytes for `elements` values (weights): may be fractional for 4-bit formats."""
        if self.block:
            return elements / self.block * (self.block * self.bits / 8 + self.scale_bytes)
        return elements * self.bits / 8


KV_DTYPES: dict[str, KVDtype] = {
    d.name: d
    for d in (
        KVDtype("float32", 32, note=Message("kv.dtype.float32", "4 bytes per value")),
        KVDtype("float16", 16, note=Message("kv.dtype.float16", "2 bytes per value")),
        KVDtype("bfloat16", 16, note=Message("kv.dtype.bfloat16", "2 bytes per value")),
        KVDtype(
            "fp8",
            8,
            tensor_scale_bytes=4,
            note=Message(
                "kv.dtype.fp8", "1 byte per value (e4m3) + one float32 scale per layer for K and one for V"
            ),
        ),
        KVDtype(
            "int8",
            8,
            group=64,
            note=Message(
                "kv.dtype.int8",
                "transformers QuantizedCache (hqq): 1 byte per value + a scale and a zero per 64 values",
            ),
        ),
        KVDtype(
            "int4",
            4,
            group=64,
            note=Message(
                "kv.dtype.int4",
                "QuantizedCache (quanto): two values per byte + a scale and a zero per 64 values",
            ),
        ),
        KVDtype(
            "int2",
            2,
            group=64,
            note=Message(
                "kv.dtype.int2",
                "QuantizedCache (quanto): four values per byte + a scale and a zero per 64 values",
            ),
        ),
        KVDtype(
            "q8_0",
            8,
            32,
            2,
            note=Message(
                "kv.dtype.q8_0", "llama.cpp: blocks of 32 int8 + one float16 scale = 34 bytes / 32 values"
            ),
        ),
        KVDtype(
            "q4_0",
            4,
            32,
            2,
            note=Message(
                "kv.dtype.q4_0", "llama.cpp: blocks of 32 4-bit + one float16 scale = 18 bytes / 32 values"
            ),
        ),
    )
}
_DTYPE_ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "q8": "q8_0",
    "q4": "q4_0",
}
SCALE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}  # a group format's scales, in the model's dtype


def resolve_kv_dtype(dtype: Any) -> KVDtype:
    """'float16', 'bf16', 'torch.float32', torch.bfloat16, 'q4_0', ... -> KVDtype; else PlaygroundError."""
    name = str(dtype).strip().lower().removeprefix("torch.")
    name = _DTYPE_ALIASES.get(name, name)
    if name not in KV_DTYPES:
        raise PlaygroundError(
            "Unknown dtype {dtype!r}: use one of {allowed}.",
            key="kv.error.dtype",
            dtype=dtype,
            allowed=", ".join(KV_DTYPES),
        )
    return KV_DTYPES[name]
