"""Several models in one process: "the engine for model X", loaded when first asked for, bounded.

    registry = ModelRegistry()
    registry.add("smollm2-135m-instruct", lm)             # the app's own model: never unloaded
    for event in registry.iter_load("gemma-3-270m"):      # the estimate first, then loading progress
        print(event.message)
    gemma = registry.engine("gemma-3-270m")               # loaded now: returned at once
    registry.connect("big", "http://127.0.0.1:8080", "llama.cpp")   # a remote engine as one side

Each model is its own engine, with its own running batch and KV store (engine/local.py): two models
never share a cache or a batch. The bound: at most `max_models` in-process models at once
(PLAYGROUND_MAX_MODELS), and a load must leave `memory_reserve_mib` free beyond its estimate
(models/estimate.py). To make room the least recently used model is unloaded, but never the app's own
(pinned) nor one in use (`using`); when nothing can go, the load is refused with the numbers that say
why. Remote engines hold no weights here and do not count.
"""

from __future__ import annotations

import gc
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playground.engine.base import Engine
from playground.engine.embedded import DEFAULT_EMBEDDED, embedded_model
from playground.engine.loading import load_model
from playground.errors import PlaygroundError
from playground.messages import Message
from playground.models.catalog import ModelEntry, cached_hub_models, embedded_entries, hub_online
from playground.models.estimate import MemoryEstimate, estimate_memory, free_memory_bytes, gb
from playground.settings import Settings, load_settings

MIB = 2**20


@dataclass(frozen=True)
class LoadEvent:
    """One line of a model's loading; the last one carries the engine, ready."""

    message: str
    engine: Engine | None = None
    estimate: MemoryEstimate | None = None


@dataclass
class _Held:
    """A model in the registry."""

    engine: Engine
    pinned: bool = False  # the app's own model: never unloaded
    remote: bool = False  # a remote engine (no weights here)
    users: int = 0  # callers inside `using` now


def model_key(name: str | None, quantize: str | None = None) -> str:
    """The name a model is held under: an embedded model's own name (None: the default), else the name
    as given; '@format' for served-quantized weights ('smollm2-135m-instruct@int8')."""
    embedded = embedded_model(name)
    base = embedded.name if embedded is not None else str(name).strip()
    if not base:
        raise PlaygroundError(
            "The model name is empty: pick a model or type a Hub id or a path.", key="models.error.empty"
        )
    return f"{base}@{quantize}" if quantize else base


class ModelRegistry:
    """The loaded models of this process (see the module docstring)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        loader: Callable[..., Engine] = load_model,
        free_bytes: Callable[[], int | None] | None = None,
    ) -> None:
        self.settings = settings or load_settings()
        self._load = loader
        self._free = free_bytes or (lambda: free_memory_bytes(self.settings.device))
        self._held: OrderedDict[str, _Held] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        # One load at a time (the bound is checked and the model held under it: two loads never both
        # take the last place); asking for a model that is held never waits for it.
        self._loading = threading.Lock()

    # --- what is here -----------------------------------------------------------------------

    def loaded(self) -> list[str]:
        """The held models' names, least recently used first."""
        with self._lock:
            return list(self._held)

    def held(self) -> list[tuple[str, Engine]]:
        """The held models, (name, engine), least recently used first."""
        with self._lock:
            return [(name, h.engine) for name, h in self._held.items()]

    def available(self) -> list[ModelEntry]:
        """What a picker offers: the loaded models, the embedded ones, the Hub models in the local
        cache (and, when `hub_online`, any Hub id typed by hand)."""
        with self._lock:
            held = [(name, h.remote) for name, h in self._held.items()]
        entries = [
            ModelEntry(name, "remote" if remote else "loaded", name, loaded=True) for name, remote in held
        ]
        names = {name for name, _ in held}
        entries += [e for e in embedded_entries(names) if e.name not in names]
        entries += [
            ModelEntry(i, "cached", i, "in the local Hub cache")
            for i in cached_hub_models()
            if i not in names
        ]
        return entries

    @property
    def hub_online(self) -> bool:
        return hub_online()

    def estimate(self, name: str | None, quantize: str | None = None) -> MemoryEstimate:
        """What loading `name` will hold in memory, counted before loading (models/estimate.py)."""
        s = self.settings
        return estimate_memory(
            name, s.device, s.dtype, cache_root=Path(s.cache_dir), trust_remote_code=s.trust_remote_code
        )

    # --- adding models ------------------------------------------------------------------------

    def add(self, name: str | None, engine: Engine, *, pinned: bool = True) -> str:
        """Hold an engine loaded elsewhere (the app's own model: pinned, never unloaded)."""
        key = model_key(name, getattr(engine, "quantization", None))
        with self._lock:
            self._held[key] = _Held(engine, pinned=pinned, remote=getattr(engine, "url", None) is not None)
        return key

    def key_of(self, engine: Engine) -> str | None:
        """The name an engine is held under (None: not held here)."""
        with self._lock:
            return next((key for key, h in self._held.items() if h.engine is engine), None)

    def hold(self, key: str) -> Engine:
        """Keep a loaded model loaded until `let_go(key)` (a browser tab that uses it: the bound never
        unloads it meanwhile). Loads nothing: a model not held is refused with the loaded ones."""
        with self._lock:
            held = self._held.get(key)
            if held is None:
                raise PlaygroundError(
                    "{model} is not loaded (loaded: {loaded}): pick it in the model list to load it.",
                    key="models.error.not_loaded",
                    model=key,
                    loaded=", ".join(self._held) or "none",
                )
            held.users += 1
            self._held.move_to_end(key)
            return held.engine

    def let_go(self, key: str) -> None:
        """One holder of `key` is done with it (see hold): idle again once none is left."""
        with self._lock:
            held = self._held.get(key)
            if held is not None and held.users > 0:
                held.users -= 1

    def connect(self, name: str, url: str, kind: str, **options: Any) -> Engine:
        """A remote engine (llama-server, vLLM, SGLang) held as `name`: one side of a comparison. A
        server that is down or answers nonsense raises EngineUnavailable with what happened."""
        from playground.engine.remote import connect

        self._check_replaceable(name)
        engine = connect(url, kind, **options)
        with self._lock:
            try:
                self._check_replaceable(name, locked=True)
            except PlaygroundError:
                _close(engine)
                raise
            old = self._held.pop(name, None)
            self._held[name] = _Held(engine, remote=True)
        if old is not None:
            _close(old.engine)
        return engine

    def _check_replaceable(self, name: str, locked: bool = False) -> None:
        """A server may take the name of an idle server only: never an in-process model's (the app's
        own, or one a tab loaded) nor a name a request is using."""
        with nullcontext() if locked else self._lock:
            held = self._held.get(name)
        if held is not None and (not held.remote or held.pinned or held.users):
            raise PlaygroundError(
                "{model} is a loaded model's name (or in use): give the server another name.",
                key="models.error.name_taken",
                model=name,
            )

    def engine(
        self,
        name: str | None = None,
        *,
        quantize: str | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> Engine:
        """The engine for model `name` (None: the app's own model, else the default embedded one),
        loaded first when it is not held (progress: one line per loading step)."""
        last: LoadEvent | None = None
        for last in self.iter_load(name, quantize):
            if progress is not None:
                progress(last.message)
        assert last is not None and last.engine is not None  # iter_load ends with the engine or raises
        return last.engine

    def iter_load(self, name: str | None = None, quantize: str | None = None) -> Iterator[LoadEvent]:
        """Load `name` if needed, as events: its memory estimate, room made (models unloaded), each
        loading step, and last the engine. Raises PlaygroundError for an unknown model, one that won't
        fit, or a failed load; the models held stay as they were."""
        key = self._resolve(name, quantize)
        held = self._touch(key)
        if held is not None:
            yield LoadEvent(_loaded(key), held)
            return
        with self._loading:
            held = self._touch(key)  # another caller may have loaded it meanwhile
            if held is not None:
                yield LoadEvent(_loaded(key), held)
                return
            estimate = self.estimate(name, quantize)
            line = Message("models.event.estimate", "Memory estimate: {line}.", line=estimate.line())
            yield LoadEvent(line, estimate=estimate)
            yield from self._make_room(key, estimate)
            yield from self._load_in_thread(key, name, quantize, estimate)

    def _resolve(self, name: str | None, quantize: str | None) -> str:
        if name is None and quantize is None:
            with self._lock:
                pinned = next((k for k, h in self._held.items() if h.pinned), None)
            return pinned or DEFAULT_EMBEDDED
        return model_key(name, quantize)

    def _touch(self, key: str) -> Engine | None:
        with self._lock:
            held = self._held.get(key)
            if held is None:
                return None
            self._held.move_to_end(key)
            return held.engine

    def _load_in_thread(
        self, key: str, name: str | None, quantize: str | None, estimate: MemoryEstimate
    ) -> Iterator[LoadEvent]:
        """load_model in a thread, its progress lines handed out as they come; the model is held as
        soon as it is loaded (also when the caller stopped listening)."""
        lines: queue.Queue[Any] = queue.Queue()
        done = object()

        def work() -> None:
            try:
                engine = self._load(name, **self._load_options(quantize), progress=lines.put)
                with self._lock:
                    self._held[key] = _Held(engine)
                lines.put(done)
            except BaseException as exc:  # handed to the caller below
                lines.put(exc)

        threading.Thread(target=work, name=f"load {key}", daemon=True).start()
        while (line := lines.get()) is not done:
            if isinstance(line, BaseException):
                raise _load_error(key, line) from line
            yield LoadEvent(line if isinstance(line, str) else str(line), estimate=estimate)
        yield LoadEvent(_loaded(key), self._touch(key), estimate)

    def _load_options(self, quantize: str | None) -> dict[str, Any]:
        s = self.settings
        return dict(
            device=s.device,
            dtype=s.dtype,
            cache_dir=s.cache_dir,
            trust_remote_code=s.trust_remote_code,
            decode=s.decode if s.compile else "eager",
            batching=s.batching,
            quantize=quantize,
        )

    # --- the bound ----------------------------------------------------------------------------------

    def _make_room(self, key: str, estimate: MemoryEstimate) -> Iterator[LoadEvent]:
        """Unload least recently used idle models until one more fits, by count and by memory."""
        limit = max(1, int(self.settings.max_models))
        while self._local_count() >= limit:
            gone = self._unload_one()
            if gone is None:
                raise PlaygroundError(
                    "Cannot load {model}: {count} models are loaded, the most at once "
                    "(PLAYGROUND_MAX_MODELS={limit}), and none can be unloaded now ({kept}).",
                    key="models.error.too_many",
                    model=key,
                    count=self._local_count(),
                    limit=limit,
                    kept=self._why_kept(),
                )
            yield LoadEvent(
                Message(
                    "models.event.unloaded",
                    "Unloaded {gone} (least recently used) to make room for {model}.",
                    gone=gone,
                    model=key,
                )
            )
        yield from self._free_memory(key, estimate)

    def _free_memory(self, key: str, estimate: MemoryEstimate) -> Iterator[LoadEvent]:
        """Unload least recently used idle models until the load leaves the reserve free."""
        needed = estimate.load_bytes + int(self.settings.memory_reserve_mib) * MIB
        while (free := self._free()) is not None and needed > free:
            gone = self._unload_one()
            if gone is None:
                raise PlaygroundError(
                    "Cannot load {model}: it needs about {needed} ({estimate}, plus {reserve} MiB kept "
                    "free) and {free} is free here. Unloading would not help ({kept}): pick a smaller "
                    "model or another dtype.",
                    key="models.error.no_room",
                    model=key,
                    needed=gb(needed),
                    estimate=estimate.line(),
                    reserve=self.settings.memory_reserve_mib,
                    free=gb(free),
                    kept=self._why_kept(),
                )
            yield LoadEvent(
                Message(
                    "models.event.freed",
                    "Unloaded {gone} (least recently used) to free memory for {model}.",
                    gone=gone,
                    model=key,
                )
            )

    def _local_count(self) -> int:
        with self._lock:
            return sum(not h.remote for h in self._held.values())

    def _why_kept(self) -> list[Message] | Message:
        """Why each in-process model stays (a list a Message reads joined by "; ")."""
        with self._lock:
            kept = [
                Message("models.kept.own", "{model}: the app’s own model", model=name)
                if h.pinned
                else Message("models.kept.in_use", "{model}: in use by {users}", model=name, users=h.users)
                for name, h in self._held.items()
                if not h.remote
            ]
        return kept or Message("models.kept.none", "no model is loaded")

    def _unload_one(self) -> str | None:
        """Unload the least recently used idle, unpinned in-process model; its name (None: none can go)."""
        with self._lock:
            victim = next((k for k, h in self._held.items() if not (h.pinned or h.remote or h.users)), None)
            held = self._held.pop(victim) if victim is not None else None
        if held is not None:
            _close(held.engine)
        return victim

    def unload(self, name: str) -> None:
        """Unload a model now (its KV caches and batch go with it). The app's own model and a model in
        use stay: a clear refusal says so."""
        key = model_key(name)
        with self._lock:
            held = self._held.get(key)
            if held is None:
                raise PlaygroundError(
                    "{model} is not loaded (loaded: {loaded}).",
                    key="registry.error.not_loaded",
                    model=key,
                    loaded=", ".join(self._held) or Message("registry.none", "none"),
                )
            if held.pinned or held.users:
                why = (
                    Message("registry.why.own", "it is the app's own model")
                    if held.pinned
                    else Message("registry.why.in_use", "{users} requests are using it", users=held.users)
                )
                raise PlaygroundError(
                    "{model} stays loaded: {why}.", key="registry.error.stays_loaded", model=key, why=why
                )
            del self._held[key]
        _close(held.engine)

    @contextmanager
    def using(self, name: str | None = None, *, quantize: str | None = None) -> Iterator[Engine]:
        """The engine for `name` (loaded if needed), kept loaded while the block runs."""
        engine = self.engine(name, quantize=quantize)
        with self._lock:
            held = next((h for h in self._held.values() if h.engine is engine), None)
            if held is None:  # another caller's load made room by unloading it, just now
                raise PlaygroundError(
                    "{model} was unloaded to make room for another model just now: ask again.",
                    key="models.error.unloaded",
                    model=model_key(name, quantize) if name or quantize else engine.name,
                )
            held.users += 1
        try:
            yield engine
        finally:
            with self._lock:
                held.users -= 1


def _close(engine: Any) -> None:
    """Free an unloaded engine's caches and threads now, and its weights once no one holds it."""
    close = getattr(engine, "close", None)
    if callable(close):
        close()
    gc.collect()


def _loaded(key: str) -> Message:
    return Message("models.event.loaded", "{model} is loaded.", model=key)


def _load_error(key: str, exc: BaseException) -> PlaygroundError:
    if isinstance(exc, PlaygroundError):
        return exc
    if isinstance(exc, MemoryError):
        return PlaygroundError(
            "Cannot load {model}: out of memory while loading it.", key="models.error.oom", model=key
        )
    return PlaygroundError(
        "Cannot load {model}: {kind}: {detail}",
        key="models.error.failed",
        model=key,
        kind=type(exc).__name__,
        detail=str(exc)[:300],
    )
