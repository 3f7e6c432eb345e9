"""Which models can be loaded here: the loaded ones, the embedded ones, the Hub models already in the
local Hugging Face cache, and any Hub id when the Hub is reachable."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playground.engine.embedded import EMBEDDED_MODELS


@dataclass(frozen=True)
class ModelEntry:
    """One model a picker can offer."""

    name: str  # what ModelRegistry.engine(name) and load_model(name) take
    kind: str  # "loaded", "embedded", "cached" (a Hub model in the local cache) or "remote"
    title: str  # how it reads in a list
    note: str = ""  # size and terms, or why it cannot load
    loaded: bool = False

    @property
    def usable(self) -> bool:
        """It can be loaded (or is): not an embedded model whose package is missing."""
        return not self.note.startswith(NOT_INSTALLED)


NOT_INSTALLED = "not installed"


def model_name(engine: Any) -> str:
    """The name a loaded engine goes by in a model list: an embedded model's own name (the engine's
    name is its title), else the engine's name."""
    return next((s.name for s in EMBEDDED_MODELS.values() if s.title == engine.name), str(engine.name))


def hub_online() -> bool:
    """Whether a Hub id typed by hand may load (the Hub is not switched off here)."""
    return os.environ.get("HF_HUB_OFFLINE") != "1" and os.environ.get("TRANSFORMERS_OFFLINE") != "1"


def embedded_entries(loaded: Iterable[str]) -> list[ModelEntry]:
    """The embedded models, each with its size and terms (or the command that installs it)."""
    names = set(loaded)
    out = []
    for spec in EMBEDDED_MODELS.values():
        note = f"{spec.size}, {spec.terms}" if spec.installed else f"{NOT_INSTALLED}: {spec.install}"
        out.append(ModelEntry(spec.name, "embedded", spec.title, note, spec.name in names))
    return out


def hub_cache_dir() -> Path:
    """The local Hugging Face Hub cache (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def cached_hub_models(cache: Path | None = None) -> list[str]:
    """Hub ids of the models in the local cache with a config.json (loadable offline by their id)."""
    root = cache or hub_cache_dir()
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.glob("models--*")):
        if any((snapshot / "config.json").is_file() for snapshot in (folder / "snapshots").glob("*")):
            found.append(folder.name.removeprefix("models--").replace("--", "/"))
    return found
