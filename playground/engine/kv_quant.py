"""Quantized KV caches: transformers' `QuantizedCache` with the backend each bit width runs best on.

- fp8: the built-in "fp8" backend (no package): float8 e4m3 values, one float32 scale per layer for
  the keys and one for the values, frozen at the first forward (the prompt's largest value).
- int8: the "hqq" backend, 8 bits, groups of 64 along each head vector (axis 1), a scale and a zero
  per group in the model's dtype.
- int4 / int2: the "quanto" backend (optimum-quanto), axis 0, groups of 64, a scale and a shift per
  group in the model's dtype, packed two (four) values per byte. hqq packs these widths too, but its
  axis-1 packing crashes whenever the number of groups is not a multiple of 8 / bits (an odd
  prompt length on a 3-KV-head model), and its axis 0 is far less accurate; quanto handled every
  length tried.

The residual window (the newest tokens kept in the model's dtype, re-quantized into the rest when
it fills) is 16 tokens, not transformers' default 128, which would leave a short chat unquantized.
Every format's bytes follow the KV tab's formula (playground/kv/) to the byte, scales included.

optimum-quanto unpacks int4/int2 with a C++ kernel it compiles on first use (about 2 minutes on 2
cores). It is built once per machine into the playground's cache folder (PLAYGROUND_CACHE_DIR), the
first time a cache needs it (the quantization lesson says so while it waits), so it never delays the
app's start; test.sh builds it beforehand (`from playground.engine.kv_quant import main; main()`).
"""

from __future__ import annotations

import copy
import importlib.util
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

from playground.engine.quant_bytes import filled_bytes
from playground.errors import PlaygroundError
from playground.messages import Message
from playground.settings import load_settings

RESIDUAL_TOKENS = 16  # newest tokens kept unquantized (transformers' default: 128)
GROUP = 64  # values per scale group (transformers' default)


@dataclass(frozen=True)
class KVFormat:
    """One quantized KV cache: the QuantizedCache backend and options behind a KV dtype name."""

    name: str  # the KV tab's dtype name ("int4")
    label: str  # "KV int4 (quanto)"
    backend: str  # QuantizedCache backend
    library: str  # the package that does the work ("transformers" for fp8)
    bits: int
    options: dict[str, int] = field(default_factory=dict)  # QuantizedCache keyword arguments

    def missing(self, device: torch.device) -> str | None:
        """Why this cache cannot be built here (None: it can)."""
        if self.library != "transformers" and importlib.util.find_spec(_MODULES[self.library]) is None:
            return Message(
                "kv.quant.not_installed",
                "{label} needs the {library} package, which is not installed (requirements.txt).",
                label=self.label,
                library=self.library,
            )
        if self.backend == "fp8" and device.type == "mps":
            return Message(
                "kv.quant.no_float8",
                "{label} needs float8 tensors, which torch does not have on mps.",
                label=self.label,
            )
        if self.backend in ("hqq", "quanto") and device.type not in ("cpu", "cuda"):
            return Message(
                "kv.quant.device",
                "{label} ({library}) runs on cpu and cuda only, not on {device}.",
                label=self.label,
                library=self.library,
                device=device.type,
            )
        return None

    @property
    def residual(self) -> int:
        return self.options.get("residual_length", 0)


_MODULES = {"hqq": "hqq", "optimum-quanto": "optimum.quanto"}
_GROUPED = {"q_group_size": GROUP, "residual_length": RESIDUAL_TOKENS}
KV_FORMATS: dict[str, KVFormat] = {
    f.name: f
    for f in (
        KVFormat("fp8", "KV fp8", "fp8", "transformers", 8),
        KVFormat(
            "int8", "KV int8 (hqq)", "hqq", "hqq", 8, {"nbits": 8, "axis_key": 1, "axis_value": 1, **_GROUPED}
        ),
        KVFormat("int4", "KV int4 (quanto)", "quanto", "optimum-quanto", 4, {"nbits": 4, **_GROUPED}),
        KVFormat("int2", "KV int2 (quanto)", "quanto", "optimum-quanto", 2, {"nbits": 2, **_GROUPED}),
    )
}


def kv_format(name: Any) -> KVFormat:
    """The KV format called name, or a PlaygroundError listing the known ones."""
    key = str(name or "").strip().lower()
    if key not in KV_FORMATS:
        raise PlaygroundError(
            "Unknown KV cache format {name!r}: use one of {allowed}.",
            key="kv.quant.unknown",
            name=name,
            allowed=", ".join(KV_FORMATS),
        )
    return KV_FORMATS[key]


def quantized_cache(config: Any, fmt: KVFormat, device: torch.device, cache_dir: str | None = None) -> Any:
    """An empty QuantizedCache in fmt for a model with this config (its quanto kernel built first)."""
    from transformers import QuantizedCache

    problem = fmt.missing(device)
    if problem:
        raise PlaygroundError(problem)
    if fmt.backend == "quanto":
        quanto_kernel(device, cache_dir)
    try:
        cache = QuantizedCache(fmt.backend, config, **fmt.options)
    except (ValueError, ImportError) as exc:
        raise PlaygroundError(
            "{label} cannot be built for this model: {why}",
            key="kv.quant.unbuildable",
            label=fmt.label,
            why=str(exc),
        ) from None
    cache.fork = lambda: fork_cache(cache)  # engine/cache.py copy_cache() calls it (a sequence's fork)
    return cache


def fork_cache(cache: Any) -> Any:
    """An independent copy of a quantized cache. quanto's packed tensors cannot be deep-copied, so
    each tensor subclass is rebuilt from clones of its inner tensors first."""
    twin = copy.copy(cache)
    twin.layers = [_copy_layer(layer) for layer in cache.layers]
    twin.fork = lambda: fork_cache(twin)
    return twin


def _copy_layer(layer: Any) -> Any:
    memo: dict[int, Any] = {}
    for value in vars(layer).values():
        for tensor in value if isinstance(value, tuple) else (value,):
            if isinstance(tensor, torch.Tensor) and type(tensor) not in (torch.Tensor, torch.nn.Parameter):
                memo[id(tensor)] = _clone(tensor)
    return copy.deepcopy(layer, memo)


def _clone(tensor: torch.Tensor) -> torch.Tensor:
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is None or type(tensor) in (torch.Tensor, torch.nn.Parameter):
        return tensor.clone()
    names, context = flatten()
    inner = {name: _clone(getattr(tensor, name)) for name in names}
    return type(tensor).__tensor_unflatten__(inner, context, tensor.size(), tensor.stride())


# --- optimum-quanto's C++ kernel, built once per machine -------------------------------------------

_build_lock = threading.Lock()


def quanto_build_dir(cache_dir: str | None = None) -> Path:
    """Where quanto's compiled kernel lives: the cache folder, keyed by the versions it depends on."""
    root = Path(cache_dir or load_settings().cache_dir)
    python = f"py{sys.version_info[0]}{sys.version_info[1]}"
    key = f"quanto-{version('optimum-quanto')}-torch{torch.__version__}-{python}"
    return root / key


def quanto_kernel_built(cache_dir: str | None = None) -> bool:
    return (quanto_build_dir(cache_dir) / "quanto_cpp.so").exists()


def quanto_kernel(
    device: torch.device, cache_dir: str | None = None, report: Callable[[str], None] | None = None
) -> None:
    """Point quanto's extension at the cache folder and load it (compiling it the first time,
    about 2 minutes on 2 cores: report says so). On CUDA quanto compiles its CUDA kernel itself."""
    if device.type != "cpu":
        return
    from optimum.quanto.library.extensions import get_extension

    extension = get_extension("quanto_cpp")
    with _build_lock:
        if extension._lib is not None:  # loaded already in this process
            return
        folder = quanto_build_dir(cache_dir)
        folder.mkdir(parents=True, exist_ok=True)
        extension.build_directory = str(folder)
        if report is not None and not quanto_kernel_built(cache_dir):
            report(
                f"optimum-quanto compiles its C++ unpacking kernel once for this machine (about 2 minutes "
                f"on 2 cores) into {folder}"
            )
        try:
            _ = extension.lib  # builds it the first time, then loads it
        except (OSError, RuntimeError, ImportError) as exc:
            reason = " ".join(str(exc).split())[:200]
            raise PlaygroundError(
                "optimum-quanto could not build its C++ kernel on cpu: {why}",
                key="kv.quant.kernel",
                why=reason,
            ) from None


# --- what a quantized cache holds -----------------------------------------------------------------


@dataclass(frozen=True)
class CacheBytes:
    """A quantized cache's bytes, measured on its tensors, and how many tokens are quantized."""

    layers: tuple[int, ...]  # bytes per layer (quantized states + scales + the unquantized residual)
    quantized_tokens: int  # tokens held quantized (per layer)
    residual_tokens: int  # tokens held in the model's dtype (the residual window)

    @property
    def total(self) -> int:
        return sum(self.layers)


def cache_bytes(cache: Any) -> CacheBytes:
    """Bytes of a QuantizedCache (or a plain one): Σ numel × element_size over every tensor its
    layers hold (packed values, scales, zeros, the residual keys and values)."""
    sizes, quantized, residual = [], 0, 0
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        held = keys.shape[-2] if isinstance(keys, torch.Tensor) and keys.dim() == 4 else 0
        total = int(getattr(layer, "cumulative_length", held))
        parts = [getattr(layer, n, None) for n in ("_quantized_keys", "_quantized_values", "keys", "values")]
        sizes.append(filled_bytes(parts))
        quantized, residual = total - held, held
    return CacheBytes(tuple(sizes), quantized, residual)


def measure_quantized(engine: Any, name: str, seq_len: int, seed: int = 0) -> CacheBytes:
    """Fill a QuantizedCache in format name by one forward of the engine's model over seq_len
    synthetic ids (through the engine's probes, in its prefill chunks); the bytes it holds."""
    fmt, probes = kv_format(name), engine.probes
    if probes is None:
        raise PlaygroundError(
            "The {kind} engine cannot build a cache here.", key="kv.quant.no_probes", kind=engine.kind
        )
    sequence = probes.sequence(new_cache=lambda: quantized_cache(engine.config, fmt, probes.device))
    generator = torch.Generator().manual_seed(seed)
    sequence.advance(torch.randint(0, engine.vocab_size, (seq_len,), generator=generator).tolist())
    return cache_bytes(sequence.cache)


def main() -> None:
    """Build quanto's C++ kernel into the cache folder (test.sh runs this before the tests)."""
    if importlib.util.find_spec("optimum.quanto") is None:
        print("optimum-quanto is not installed: nothing to build")
        return
    if quanto_kernel_built():
        print(f"optimum-quanto kernel already built in {quanto_build_dir()}")
        return
    quanto_kernel(torch.device("cpu"), report=print)
    print(f"optimum-quanto kernel ready in {quanto_build_dir()}")


if __name__ == "__main__":
    main()
