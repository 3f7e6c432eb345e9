"""App-wide settings: one dataclass, each field overridable by a PLAYGROUND_* variable."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from playground.errors import PlaygroundError

ENV_PREFIX = "PLAYGROUND_"


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "llm-playground")


@dataclass
class Settings:
    # Model to load: None/"" = the embedded SmolLM2-135M-Instruct; "gemma-3-270m" = the second embedded
    # model; else a Hub id, a dir or a .gguf path.
    model: str | None = None
    # A second, smaller model with the same tokenizer: a draft for speculative decoding ("Under the hood").
    draft_model: str | None = None
    # Serve on quantized weights (the decoder's Linear layers): int8 (torchao), hqq8/4/3/2 (slower
    # on a CPU); None = as loaded. The lesson "Quantization" needs the model as loaded, so it is off then.
    quantize: str | None = None
    # "auto" picks cuda, then mps, then cpu.
    device: str = "auto"
    # Weights dtype; None = float32 on cpu, bfloat16 on cuda/mps.
    dtype: str | None = None
    # Where converted weights of the embedded model are cached (safetensors + tokenizer).
    cache_dir: str = field(default_factory=_default_cache_dir)
    # Only run code shipped with a Hub model when the user explicitly allows it.
    trust_remote_code: bool = False
    # Web server (Spaces sets GRADIO_SERVER_NAME=0.0.0.0; locally only this machine can connect).
    host: str = field(default_factory=lambda: os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    port: int = field(default_factory=lambda: int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    share: bool = False
    # Open the app in a web browser when started from a terminal on a desktop (--no-browser: don't).
    browser: bool = True
    # Upper bound for "max new tokens" in chat (and other tabs).
    max_new_tokens_limit: int = 1024
    # Memory bound for the KV caches the engine keeps between calls, all tabs together (MiB); least
    # recently used caches are dropped beyond it (and recomputed from their ids when needed again).
    kv_store_mib: int = 512
    # How many requests may use the model at once (queue beyond that); with continuous batching the
    # batch's places (batch_size) are the limit instead.
    model_concurrency: int = 2
    # "continuous": every chat stream and step of every user joins one running batch, scheduled per
    # iteration (engine/batcher.py); "off": each request runs its own forwards, model_concurrency at once.
    batching: str = "continuous"
    # Requests in the running batch at once (more wait in the queue for a place).
    batch_size: int = 32
    # Tokens per batch iteration while any request decodes, its tokens and prompt chunks together;
    # 0 = 128 (engine/batcher.py DECODING_TOKENS). With none decoding, an iteration reads the
    # prefill chunk (256 on a CPU, 2048 on a GPU).
    batch_tokens: int = 0
    # Browser tabs whose chat, step session and beam tree are kept (and Gradio's own per-tab state);
    # beyond it the least recently used tab's are released. A closed tab releases its own at once.
    max_workspaces: int = 512
    # Seconds the queue's estimate assumes for a model event that has not run yet (Gradio shows an
    # estimate only once every running event has a duration); the event's first real run replaces it.
    queue_first_estimate_s: float = 5.0
    # Recorded traces to serve instead of a model (a .json file or a folder of them): --replay.
    replay: str | None = None
    # A serving engine to use instead of loading the model here: "llama.cpp", "vllm" or "sglang".
    engine: str | None = None
    # That engine's base URL, e.g. http://127.0.0.1:8080 (llama-server) or http://gpu-box:8000 (vLLM).
    engine_url: str | None = None
    # The served model's tokenizer: a local directory, .gguf file or Hub id (default: found from the server).
    engine_tokenizer: str | None = None
    # Alternatives asked per position; 0 = the server's maximum (vLLM: --max-logprobs), 1000 where the
    # server sets none (llama-server, SGLang; the vocabulary size there gives exact sampling stages).
    engine_top_n: int = 0
    # Seconds to wait for an engine's answer (a long prompt on a CPU server takes a while).
    engine_timeout: int = 120
    # Bearer token for engines started with an API key (vLLM --api-key, SGLang --api-key).
    engine_api_key: str | None = None
    # The app's own OpenAI-compatible API (/v1/...): a bearer token every request must send (--api-key);
    # None = no key asked (the default: on 127.0.0.1 only this machine can connect).
    api_key: str | None = None
    # On a GPU, decode with a static KV cache and CUDA graphs captured at load; False (--no-compile)
    # keeps the eager path (the only path on CPU unless decode="static" is asked for).
    compile: bool = True
    # Decode path when compile is on: auto (static on CUDA, eager elsewhere), static (everywhere,
    # CPU included: PLAYGROUND_DECODE=static runs the test suite on it) or eager.
    decode: str = "auto"
    # Tokens in the static KV slot that serves a lone request (a longer sequence stays batched). It is
    # allocated on the GPU at load, full size: static_tokens x the KV bytes per token (SmolLM2-135M in
    # bf16: 22.5 KiB/token, 180 MiB for 8192 tokens; Llama-3.1-8B: 1 GiB).
    static_tokens: int = 8192
    # Models loaded in this process at once (playground/models): loading one more unloads the least
    # recently used idle one (never the app's own model); with none idle, the load is refused.
    max_models: int = 2
    # Memory a model load must leave free (MiB) beyond the model's own estimate (models/estimate.py).
    memory_reserve_mib: int = 512


def _parse(name: str, value: str, kind: type | str) -> object:
    kind_name = kind if isinstance(kind, str) else kind.__name__
    if "bool" in kind_name:
        if value.strip().lower() not in {"1", "true", "yes", "on", "0", "false", "no", "off", ""}:
            raise PlaygroundError(f"{name} must be true or false, got {value!r}")
        return value.strip().lower() in {"1", "true", "yes", "on"}
    if "float" in kind_name:
        try:
            return float(value)
        except ValueError:
            raise PlaygroundError(f"{name} must be a number, got {value!r}") from None
    if "int" in kind_name:
        try:
            return int(value)
        except ValueError:
            raise PlaygroundError(f"{name} must be a whole number, got {value!r}") from None
    return value or None if "None" in kind_name else value


def load_settings(**overrides: object) -> Settings:
    """Settings from defaults, then PLAYGROUND_<FIELD> variables, then explicit overrides."""
    settings = Settings()
    for f in fields(Settings):
        variable = ENV_PREFIX + f.name.upper()
        env_value = os.environ.get(variable)
        if env_value is not None:
            setattr(settings, f.name, _parse(variable, env_value, f.type))
    for name, value in overrides.items():
        if value is not None:
            setattr(settings, name, value)
    return settings
