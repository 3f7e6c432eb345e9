"""How much memory a model needs, told before it is loaded.

The weights are counted, not guessed: an embedded model's parameters are known (measured once), a
local directory's or a Hub id's from its config built on the meta device (no weights read), a .gguf
file's from its tensor table. The weights take parameters x bytes per value in the dtype served;
loading holds more for a while: converting a GGUF file holds the GGUF model and its plain copy at
once (twice the weights).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from playground.engine.embedded import EMBEDDED_MODELS, EmbeddedModel, embedded_model
from playground.engine.forward import free_device_memory
from playground.engine.loading import resolve_device, resolve_weights_dtype
from playground.errors import PlaygroundError
from playground.messages import Message

BYTES_PER_VALUE = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}
BYTES_PER_VALUE_BY_NAME = {str(k).removeprefix("torch."): v for k, v in BYTES_PER_VALUE.items()}
# Measured parameter counts of the embedded models (LocalEngine.num_parameters after loading), so the
# estimate needs neither the converted cache nor the assembled GGUF file.
EMBEDDED_PARAMETERS = {"smollm2-135m-instruct": 134_515_008, "gemma-3-270m": 268_098_176}


@dataclass(frozen=True)
class MemoryEstimate:
    """What loading a model will hold in memory (bytes)."""

    name: str
    parameters: int
    dtype: str  # the weights' dtype as served ("float32")
    weights_bytes: int  # parameters x bytes per value
    load_bytes: int  # the most held while loading (a GGUF conversion: twice the weights)
    counted_from: str  # where the parameters were counted ("embedded", "config", "gguf")

    def line(self) -> Message:
        """'gemma-3-270m: 268.1 M parameters × 4 B (float32) = 1.07 GB of weights (2.14 GB while loading)'."""
        loading = ""
        if self.load_bytes > self.weights_bytes:
            loading = Message(
                "models.estimate.loading", " ({bytes} while loading)", bytes=gb(self.load_bytes)
            )
        return Message(
            "models.estimate.line",
            "{model}: {millions:,.1f} M parameters × {size} B ({dtype}) = {weights} of weights{loading}",
            model=self.name,
            millions=self.parameters / 1e6,
            size=BYTES_PER_VALUE_BY_NAME.get(self.dtype, 4),
            dtype=self.dtype,
            weights=gb(self.weights_bytes),
            loading=loading,
        )


def gb(n: float) -> str:
    return f"{n / 1e9:,.2f} GB"


def estimate_memory(
    name: str | None,
    device: str = "cpu",
    dtype: str | None = None,
    *,
    cache_root: Path | None = None,
    trust_remote_code: bool = False,
) -> MemoryEstimate:
    """The memory loading `name` (as load_model takes it) will need, counted without loading it."""
    torch_dtype = resolve_weights_dtype(dtype, resolve_device(device))
    embedded = embedded_model(name)
    if embedded is not None:
        parameters, source = EMBEDDED_PARAMETERS[embedded.name], "embedded"
        converting = not _converted(embedded, cache_root)
    elif str(name).endswith(".gguf"):
        parameters, converting, source = gguf_parameters(Path(str(name))), True, "gguf"
    else:
        parameters, converting, source = config_parameters(str(name), trust_remote_code), False, "config"
    weights = parameters * BYTES_PER_VALUE[torch_dtype]
    label = embedded.name if embedded is not None else str(name)
    dtype_name = str(torch_dtype).removeprefix("torch.")
    return MemoryEstimate(label, parameters, dtype_name, weights, weights * (2 if converting else 1), source)


def _converted(spec: EmbeddedModel, cache_root: Path | None) -> bool:
    """The converted cache is there (a load reads it instead of converting the GGUF file)."""
    if cache_root is None or not spec.installed:
        return False
    try:
        return (cache_root / spec.cache_key() / "config.json").is_file()
    except PlaygroundError:
        return False


def gguf_parameters(path: Path) -> int:
    """Values in a GGUF file's tensors (what transformers dequantizes them to)."""
    if not path.is_file():
        raise PlaygroundError("GGUF file not found: {path}", key="models.error.no_gguf", path=str(path))
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except (OSError, ValueError) as exc:
        raise PlaygroundError(
            "Cannot read the GGUF file {path}: {why}",
            key="models.error.bad_gguf",
            path=str(path),
            why=str(exc),
        ) from None
    return int(sum(int(tensor.n_elements) for tensor in reader.tensors))


def config_parameters(name: str, trust_remote_code: bool = False) -> int:
    """Parameters of a local model directory or a Hub id, from its config: the model is built on the
    meta device (shapes only, no memory), tied weights counted once."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(name, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise unknown_model(name, exc) from None
    return sum(p.numel() for p in model.parameters())


def unknown_model(name: str, exc: Exception | None = None) -> PlaygroundError:
    """The error for a name that is no model this process can load."""
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    unreachable = exc is not None and "couldn't connect" in str(exc)  # huggingface_hub's words
    if offline:
        where = Message("models.unknown.offline", "the Hub is offline here (HF_HUB_OFFLINE=1)")
    elif unreachable:
        where = Message(
            "models.unknown.unreachable", "the Hub could not be reached, and it is not cached here"
        )
        exc = None  # huggingface_hub's English says no more than that
    else:
        where = Message(
            "models.unknown.online", "check the spelling of the Hub id or the path, and the network"
        )
    return PlaygroundError(
        "Unknown model {name!r}{reason}: not an embedded model ({embedded}), a local model directory or "
        "a .gguf file, and {where}.",
        key="models.error.unknown",
        name=name,
        reason=f" ({_first_line(exc)})" if exc is not None else "",
        embedded=", ".join(EMBEDDED_MODELS),
        where=where,
    )


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def free_memory_bytes(device: Any = "cpu") -> int | None:
    """Memory free for a new model on the device (MemAvailable on a CPU, the free memory of a GPU)."""
    return free_device_memory(resolve_device(str(device)))
