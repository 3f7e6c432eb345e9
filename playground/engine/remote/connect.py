"""connect(url, kind): a RemoteEngine on a running llama-server, vLLM or SGLang, checked before use.

    from playground.engine import connect
    engine = connect("http://127.0.0.1:8080", "llama.cpp")      # the embedded GGUF on llama-server
    engine = connect("http://gpu-box:8000", "vllm", tokenizer="/models/Llama-3.1-70B-Instruct")

The tokenizer comes from the served model: the one given (a directory, a .gguf file, a Hub id or
a tokenizer object), else the embedded model's when the server runs the embedded GGUF, else the
path or Hub id the server reports it loaded. It is then checked against the server's own
tokenize endpoint on a probe text: a mismatch is a clear error, never wrong numbers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from playground.engine.remote.adapter import Adapter, ServerInfo
from playground.engine.remote.engine import RemoteEngine
from playground.engine.remote.http import HttpClient
from playground.engine.remote.llamacpp import LlamaCppAdapter
from playground.engine.remote.sglang import SGLangAdapter
from playground.engine.remote.vllm import VLLMAdapter
from playground.engine.sampling import SamplingSettings
from playground.errors import EngineUnavailable, PlaygroundError
from playground.messages import Message
from playground.settings import load_settings

log = logging.getLogger(__name__)

ADAPTERS: dict[str, type[Adapter]] = {
    "llama.cpp": LlamaCppAdapter,
    "vllm": VLLMAdapter,
    "sglang": SGLangAdapter,
}
KINDS = tuple(ADAPTERS)
ALIASES = {
    "llamacpp": "llama.cpp",
    "llama-cpp": "llama.cpp",
    "llama_cpp": "llama.cpp",
    "llama-server": "llama.cpp",
}
# Spaces, punctuation, digits, accents, an emoji, a tab and code: where tokenizers tend to differ.
PROBE_TEXT = "Probe: Hello, world! 1234 naïve café — 🙂\n\tdef f(x):  return x**2  # ünïcødé"
# Engines with no limit of their own (llama-server, SGLang) could send every token's log-prob, but
# the whole vocabulary is megabytes per position (measured on llama-server with 49,152 tokens:
# 4.7 MB, 0.7 s per Step request against 0.08 MB and 0.2 s for 1,000): the default is a top-1,000.
DEFAULT_TOP_N = 1000

Report = Callable[[str], None]
Tokenizers = tuple[Any, str, Any, Any]  # tokenizer, where it came from, model config, generation config


def engine_kind(kind: str) -> str:
    """The canonical engine name ("llama.cpp", "vllm", "sglang"); a clear error otherwise."""
    name = str(kind or "").strip().lower()
    name = ALIASES.get(name, name)
    if name not in ADAPTERS:
        raise PlaygroundError(
            "Unknown engine {kind!r}: use one of {kinds}.",
            key="remote.error.unknown_engine",
            kind=kind,
            kinds=", ".join(KINDS),
        )
    return name


def connect(
    url: str,
    kind: str,
    *,
    tokenizer: Any = None,
    top_n: int | None = None,
    timeout: float | None = None,
    api_key: str | None = None,
    progress: Report | None = None,
    transport: Any = None,
) -> RemoteEngine:
    """A RemoteEngine on the server at url (see the module doc). top_n: alternatives per position
    (default: the server's maximum); timeout: seconds to wait for an answer; transport: an httpx
    transport used instead of the network (tests)."""
    report = progress or log.info
    started = time.perf_counter()
    name, settings = engine_kind(kind), load_settings()
    http = _client(
        url, name, timeout or settings.engine_timeout, api_key or settings.engine_api_key, transport
    )
    adapter = ADAPTERS[name](http)
    info = adapter.server_info()
    report(f"Connected to {adapter.label} at {adapter.http.base_url}: {info.model}")
    tok, source, config, generation = resolve_tokenizer(
        tokenizer, info, name, Path(settings.cache_dir), report
    )
    check_tokenizer(adapter, tok, source)
    check_vocabulary(adapter, tok, config, info)
    n = choose_top_n(top_n or settings.engine_top_n or None, info, _vocab(tok, config, info))
    raw = probe_raw_logprobs(adapter, tok) if name != "llama.cpp" else True
    engine = RemoteEngine(
        adapter,
        tok,
        info,
        url=adapter.http.base_url,
        top_n=n,
        config=config,
        generation_config=generation,
        connect_seconds=time.perf_counter() - started,
        tokenizer_source=source,
        raw_when_sampling=raw,
    )
    report(f"Engine ready: {engine.describe()} (tokenizer from {source})")
    return engine


def _client(url: str, kind: str, timeout: float, api_key: str | None, transport: Any) -> HttpClient:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise PlaygroundError(
            "Engine URL must start with http:// or https://, got {url!r}.", key="remote.error.url", url=url
        )
    label = ADAPTERS[kind].label
    return HttpClient(url, label, read_timeout=float(timeout), api_key=api_key, transport=transport)


# --- the tokenizer ------------------------------------------------------------------------


def resolve_tokenizer(
    given: Any, info: ServerInfo, kind: str, cache_root: Path, report: Report
) -> Tokenizers:
    """The served model's tokenizer (and config, when found), from the first source that loads."""
    if given is not None and not isinstance(given, (str, Path)):
        return given, Message("remote.source.given", "the tokenizer given"), None, None
    if given:
        return load_tokenizer(str(given))
    source = info.model_source or ""
    embedded = _embedded_served(source) if kind == "llama.cpp" else None
    if embedded is not None:
        report(f"The server runs the embedded GGUF of {embedded}: using that model's tokenizer.")
        return embedded_tokenizer(cache_root, embedded)
    if not source:
        unnamed = Message("remote.why.unnamed", "the server does not say which model it loaded")
        raise PlaygroundError(_no_tokenizer(info, kind, unnamed))
    try:
        return load_tokenizer(source)
    except PlaygroundError as exc:
        raise PlaygroundError(_no_tokenizer(info, kind, exc.message)) from None


def load_tokenizer(source: str) -> Tokenizers:
    """Tokenizer, config and generation config from a directory, a .gguf file or a Hub id."""
    path = Path(source)
    kwargs: dict[str, Any] = {}
    where = source
    if source.endswith(".gguf"):
        if not path.is_file():
            raise PlaygroundError("GGUF file not found here: {path}", key="remote.error.no_gguf", path=source)
        where, kwargs = str(path.parent), {"gguf_file": path.name}
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise PlaygroundError(
            "Cannot load a tokenizer from {source!r}: {why}",
            key="remote.error.tokenizer_load",
            source=source,
            why=str(exc).splitlines()[0][:200],
        ) from None
    return (
        tokenizer,
        source,
        _optional(AutoConfig.from_pretrained, where, **kwargs),
        _optional(GenerationConfig.from_pretrained, where, **kwargs),
    )


def embedded_tokenizer(cache_root: Path, model: str | None = None) -> Tokenizers:
    """An embedded model's tokenizer (default SmolLM2's) from its converted cache (fast), else from the
    GGUF itself."""
    from playground.engine.loading import embedded_cache_dir, embedded_gguf_path, verify_cache

    cached = embedded_cache_dir(cache_root, model)
    if cached.is_dir() and verify_cache(cached) is None:
        tok, _, config, generation = load_tokenizer(str(cached))
        return (
            tok,
            Message("remote.source.embedded", "the embedded model ({path})", path=str(cached)),
            config,
            generation,
        )
    tok, _, config, generation = load_tokenizer(str(embedded_gguf_path(model, cache_root)))
    return tok, Message("remote.source.embedded_gguf", "the embedded GGUF"), config, generation


def _embedded_served(source: str) -> str | None:
    """The installed embedded model whose GGUF file the server says it loaded (None: another model)."""
    from playground.engine.embedded import EMBEDDED_MODELS

    name = Path(source).name
    return next((m.name for m in EMBEDDED_MODELS.values() if m.gguf_name == name and m.installed), None)


def _optional(load: Callable[..., Any], where: str, **kwargs: Any) -> Any:
    try:
        return load(where, **kwargs)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _no_tokenizer(info: ServerInfo, kind: str, why: str) -> Message:
    return Message(
        "remote.error.no_tokenizer",
        "Cannot find the tokenizer of {model!r} served by {kind} ({why}). Pass a local copy of the served "
        "model with --engine-tokenizer (a directory with its tokenizer files, its .gguf file or its Hub id).",
        model=info.model,
        kind=kind,
        why=why,
    )


def check_tokenizer(adapter: Adapter, tokenizer: Any, source: str) -> None:
    """The tokenizer must give the server's own ids on the probe text."""
    here = list(tokenizer(PROBE_TEXT, add_special_tokens=False).input_ids)
    there = adapter.tokenize(PROBE_TEXT)
    if here == there:
        return
    first = next(
        (i for i, (a, b) in enumerate(zip(here, there, strict=False)) if a != b), min(len(here), len(there))
    )
    raise PlaygroundError(
        "Tokenizer mismatch: the tokenizer from {source} gives {here} tokens for the probe text and {label} "
        "gives {there} (first difference at token {first}: {here_ids} here, {there_ids} there). The server "
        "runs another model: pass its own tokenizer with --engine-tokenizer, or point --engine-url at the "
        "server you meant.",
        key="remote.error.tokenizer_mismatch",
        source=source,
        here=len(here),
        label=adapter.label,
        there=len(there),
        first=first,
        here_ids=str(here[first : first + 3]),
        there_ids=str(there[first : first + 3]),
    )


def check_vocabulary(adapter: Adapter, tokenizer: Any, config: Any, info: ServerInfo) -> None:
    """The local config (when found) must describe the served model's vocabulary."""
    text = config.get_text_config() if config is not None else None
    local = int(getattr(text, "vocab_size", 0) or 0)
    if info.vocab_size and local and local != info.vocab_size:
        raise PlaygroundError(
            "Model mismatch: the local copy's config has a vocabulary of {local:,} tokens, {label}'s model "
            "has {served:,}. Pass the served model's own files with --engine-tokenizer.",
            key="remote.error.vocab_mismatch",
            local=local,
            label=adapter.label,
            served=info.vocab_size,
        )
    if info.vocab_size and len(tokenizer) > info.vocab_size:
        raise PlaygroundError(
            "Model mismatch: the tokenizer knows {known:,} tokens, more than the served model's {served:,}.",
            key="remote.error.tokenizer_larger",
            known=len(tokenizer),
            served=info.vocab_size,
        )


def _vocab(tokenizer: Any, config: Any, info: ServerInfo) -> int:
    text = config.get_text_config() if config is not None else None
    return max(len(tokenizer), int(getattr(text, "vocab_size", 0) or 0), info.vocab_size or 0)


def choose_top_n(asked: int | None, info: ServerInfo, vocab: int) -> int:
    """Alternatives per position: as asked (capped by the server), else the server's maximum
    (vLLM's --max-logprobs), or DEFAULT_TOP_N where the server sets none (llama-server, SGLang)."""
    limit = info.max_top_n if info.max_top_n is not None else vocab
    if asked is not None:
        if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
            raise PlaygroundError(
                "Engine top-N must be a whole number >= 1, got {asked!r}.",
                key="remote.error.top_n",
                asked=asked,
            )
        return min(asked, limit)
    if info.max_top_n is None:
        return min(DEFAULT_TOP_N, vocab)
    return limit


def probe_raw_logprobs(adapter: Adapter, tokenizer: Any) -> bool:
    """Do streamed log-probs stay raw when the server samples with temperature and top-k? (vLLM with
    --logprobs-mode processed_*, SGLang without SGLANG_RETURN_ORIGINAL_LOGPROB: no.)"""
    ids = list(tokenizer("The capital of France is", add_special_tokens=True).input_ids)
    raw = adapter.next_token(ids, 5)
    sampled = SamplingSettings(temperature=0.5, top_k=2)
    tokens = [e for e in adapter.stream(ids, sampled, 1, 5, seed=0, stop_ids=()) if hasattr(e, "position")]
    if not tokens:
        raise EngineUnavailable(
            Message(
                "remote.error.no_stream_token",
                "{label} streamed no token for a one-token request.",
                label=adapter.label,
            )
        )
    seen = tokens[0].position
    return all(
        abs(seen.logprob(t) - lp) < 1e-3 for t, lp in zip(raw.top_ids[:2], raw.top_logprobs[:2], strict=True)
    )
