"""Quantized weights made with a library (never hand-written rounding): a copy for the lessons, or
the served model itself (--quantize).

What is quantized: every nn.Linear inside the decoder layers (the attention and MLP projections,
210 layers and 106 M of SmolLM2-135M's 135 M weights). The embedding, the norms and the LM head
(tied to the embedding on SmolLM2) stay as loaded. Formats (WEIGHT_FORMATS):

- hqq8 / hqq4 / hqq3 / hqq2: HQQ (`hqq`), packed 8/4/3/2-bit integers in groups of 64 with a scale
  and a zero per group in the model's dtype; its half-quadratic optimiser is off (plain min-max
  rounding: about 1 s per copy here instead of a minute). Runs on CPU and CUDA; it dequantizes a
  layer on every forward, so it is no faster than float32.
- int8: torchao `Int8WeightOnlyConfig`, one int8 per weight and a scale per output row. As fast
  as float32 or a little faster on a CPU (1.1-1.2x measured), near lossless: the --quantize format.

bitsandbytes nf4 was tried and left out: on the 2-core CPU it decoded at 0.64-0.74x float32 on a
quiet machine (faster only under heavy load), for a 130 MB install; HQQ 4-bit is the 4-bit rung.

A lesson's copy is a weight-sharing twin of the engine's model (engine/probes.py) whose decoder
Linear layers are replaced by quantized ones: it holds only the new quantized tensors, and its
memory is estimated before it is made (too big: a clear refusal) and given back after the run.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from playground.engine.control import Control, check
from playground.engine.quant_bytes import model_bytes, release_memory
from playground.engine.twins import shared_weights_copy
from playground.errors import PlaygroundError
from playground.messages import Message

MIB = 2**20
TRANSIENT_LAYERS = 3  # float32 copies of the largest layer alive while it is quantized
HEADROOM = 0.8  # use at most this share of the free memory for a copy


@dataclass(frozen=True)
class WeightFormat:
    """One way to store the decoder's Linear weights."""

    name: str  # as --quantize and the lesson take it ("hqq4")
    label: str  # "HQQ 4-bit"
    library: str  # the pip package that does the work
    module: str  # what to import to find it
    bits: int  # bits of the integer code per weight
    bits_per_weight: float  # scales included, for the memory estimate (float32 scales)
    devices: tuple[str, ...]  # where the library runs it
    note: str  # one line: grouping, scales, speed
    replace: Callable[[torch.nn.Module, Any], torch.nn.Module]  # (Linear, QuantSpec) -> its quantized twin

    def missing(self, device: torch.device) -> str | None:
        """Why this format cannot run here (None: it can)."""
        if device.type not in self.devices:
            return Message(
                "quant.error.device",
                "{label} ({library}) does not run on {device} here: only on {where}.",
                label=self.label,
                library=self.library,
                device=device.type,
                where=", ".join(self.devices),
            )
        if importlib.util.find_spec(self.module) is None:
            return Message(
                "quant.error.not_installed",
                "{label} needs the {library} package, which is not installed (requirements.txt).",
                label=self.label,
                library=self.library,
            )
        return None


@dataclass(frozen=True)
class QuantSpec:
    """Where and in what dtype a quantized layer computes."""

    device: torch.device
    dtype: torch.dtype


def _hqq(bits: int) -> Callable[[torch.nn.Module, QuantSpec], torch.nn.Module]:
    def replace(linear: torch.nn.Module, spec: QuantSpec) -> torch.nn.Module:
        from hqq.core.quantize import BaseQuantizeConfig, HQQLinear

        config = BaseQuantizeConfig(nbits=bits, group_size=64)
        config["weight_quant_params"]["optimize"] = False  # min-max rounding: seconds, not a minute
        return HQQLinear(
            linear, quant_config=config, compute_dtype=spec.dtype, device=str(spec.device), del_orig=True
        )

    return replace


def _torchao_int8(linear: torch.nn.Module, spec: QuantSpec) -> torch.nn.Module:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    twin = torch.nn.Linear(
        linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta"
    )
    twin.weight, twin.bias = linear.weight, linear.bias  # shared until quantize_ replaces the weight
    quantize_(twin, Int8WeightOnlyConfig())
    return twin


HQQ_NOTE = "groups of 64, a scale and a zero each in the model's dtype; dequantized on every forward"
BOTH = ("cpu", "cuda")
_FORMATS = [
    # HQQ 3-bit packs ten values per int32 (3.2 bits); float32 scale + zero per 64 weights: 1 bit
    WeightFormat(f"hqq{b}", f"HQQ {b}-bit", "hqq", "hqq", b, b + 1 + 0.2 * (b == 3), BOTH, HQQ_NOTE, _hqq(b))
    for b in (8, 4, 3, 2)
]
_FORMATS.append(
    WeightFormat(
        "int8",
        "torchao int8",
        "torchao",
        "torchao",
        8,
        8.06,
        BOTH,
        "one int8 per weight, a scale per output row; int8 matmul kernels",
        _torchao_int8,
    )
)
WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in _FORMATS}
SERVING_FORMATS = tuple(WEIGHT_FORMATS)  # every one can serve the app (--quantize)


def weight_format(name: Any) -> WeightFormat:
    """The format called name, or a PlaygroundError listing the known ones."""
    key = str(name or "").strip().lower()
    if key not in WEIGHT_FORMATS:
        raise PlaygroundError(
            "Unknown weights format {name!r}: use one of {formats}.",
            key="quant.error.unknown",
            name=name,
            formats=", ".join(WEIGHT_FORMATS),
        )
    return WEIGHT_FORMATS[key]


def target_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Linear]]:
    """The Linear layers a format replaces: those inside the decoder layers (not the LM head)."""
    blocks = ("layers.", "h.", "blocks.")
    return [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is torch.nn.Linear and any(f".{b}" in f".{name}" for b in blocks)
    ]


@dataclass(frozen=True)
class CopyEstimate:
    """Memory a quantized copy needs, estimated before it is made."""

    weights: int  # weights replaced
    quantized_bytes: int  # their quantized form, scales included
    transient_bytes: int  # working memory while a layer is quantized
    free_bytes: int | None  # free on the device now (None: not known)

    @property
    def needed(self) -> int:
        return self.quantized_bytes + self.transient_bytes

    @property
    def fits(self) -> bool:
        return self.free_bytes is None or self.needed <= HEADROOM * self.free_bytes


def estimate_copy(model: torch.nn.Module, fmt: WeightFormat, free_bytes: int | None) -> CopyEstimate:
    """The memory a copy in fmt takes (its quantized layers + one layer's working copies)."""
    layers = target_layers(model)
    weights = sum(m.weight.numel() for _, m in layers)
    largest = max((m.weight.numel() for _, m in layers), default=0)
    return CopyEstimate(
        weights, int(weights * fmt.bits_per_weight / 8), TRANSIENT_LAYERS * largest * 4, free_bytes
    )


@dataclass
class QuantizedWeights:
    """A quantized copy of a model (a twin sharing every tensor it does not replace), its bytes as
    measured, and how long it took. free() drops it; a lesson frees it after its run."""

    fmt: WeightFormat
    model: Any
    weights: int  # weights replaced
    linear_bytes: int  # measured bytes of the replaced layers, scales included
    total_bytes: int  # measured bytes of every tensor the copy reads (shared ones included)
    seconds: float

    @property
    def bits_per_weight(self) -> float:
        return 8 * self.linear_bytes / self.weights if self.weights else float("nan")

    def free(self) -> None:
        self.model = None
        release_memory()


def quantize_layers(
    model: torch.nn.Module, fmt: WeightFormat, spec: QuantSpec, control: Control | None = None
) -> list[str]:
    """Replace model's decoder Linear layers by fmt's, one at a time (Stop is checked between
    layers); the names replaced. A library failure becomes one line naming it and the device."""
    problem = fmt.missing(spec.device)
    if problem:
        raise PlaygroundError(problem)
    names = []
    for name, linear in target_layers(model):
        check(control)
        parent, _, attribute = name.rpartition(".")
        try:
            quantized = fmt.replace(linear, spec)
        except (ImportError, RuntimeError, ValueError, AssertionError, NotImplementedError) as exc:
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise PlaygroundError(
                "{library} could not make {label} on {device}: {reason}",
                key="quant.error.failed",
                library=fmt.library,
                label=fmt.label,
                device=spec.device.type,
                reason=reason,
            ) from None
        setattr(model.get_submodule(parent), attribute, quantized)
        names.append(name)
    return names


def quantized_copy(
    model: Any, fmt: WeightFormat, spec: QuantSpec, free_bytes: int | None, control: Control | None = None
) -> QuantizedWeights:
    """A twin of model with fmt's layers (model itself is untouched), after checking that its
    estimated memory fits in free_bytes."""
    estimate = estimate_copy(model, fmt, free_bytes)
    if not estimate.fits:
        free = (estimate.free_bytes or 0) / MIB
        raise PlaygroundError(
            "A {label} copy needs about {needed:,.0f} MiB ({millions:,.1f} M weights at {bits:.2f} bits + "
            "{transient:,.0f} MiB while quantizing), but only {free:,.0f} MiB are free on {device}: free "
            "memory or use a smaller model.",
            key="quant.error.memory",
            label=fmt.label,
            needed=estimate.needed / MIB,
            millions=estimate.weights / 1e6,
            bits=fmt.bits_per_weight,
            transient=estimate.transient_bytes / MIB,
            free=free,
            device=spec.device.type,
        )
    started = time.perf_counter()
    twin = shared_weights_copy(model)
    try:
        names = quantize_layers(twin, fmt, spec, control)
    except BaseException:
        del twin
        release_memory()
        raise
    total, linear = model_bytes(twin, set(names))
    return QuantizedWeights(fmt, twin, estimate.weights, linear, total, time.perf_counter() - started)


def quantize_served(engine: Any, name: str, report: Callable[[str], None] | None = None) -> WeightFormat:
    """--quantize: replace the engine's decoder Linear layers by name's, in place (the float weights
    are freed layer by layer); sets engine.quantization and its header line; the format used."""
    fmt = weight_format(name)
    started, before = time.perf_counter(), model_bytes(engine.model)[0]
    quantize_layers(engine.model, fmt, QuantSpec(engine.device, engine.dtype))
    release_memory()
    after = model_bytes(engine.model)[0]
    engine.weights_changed()  # the twins (the running batch's among them) take the new layers
    engine.quantization = fmt.name
    engine.quantization_line = Message(
        "quant.header",
        "Weights: {label} ({library}, --quantize {name}) in the decoder's Linear layers · {after:,.0f} MB of "
        "tensors, {before:,.0f} MB as loaded · quantized in {seconds:.1f} s",
        label=fmt.label,
        library=fmt.library,
        name=fmt.name,
        after=after / 1e6,
        before=before / 1e6,
        seconds=time.perf_counter() - started,
    )
    if report is not None:
        report(engine.quantization_line)
    return fmt
