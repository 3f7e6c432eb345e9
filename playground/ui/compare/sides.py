"""The two sides of a comparison: their controls, what they ask for, and their engines for one run.

A side is a model of the app's ModelRegistry (a loaded one, an embedded one, a Hub model in the
cache, a Hub id or path typed in, a connected server) on its weights as loaded or quantized, with
its own temperature and seed. Each run loads what is not loaded yet (its memory estimate, then its
progress, in that side's status line) and holds both engines in the registry while it runs; a side
that cannot load says why, and the other side still runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.quantize import SERVING_FORMATS
from playground.engine.remote.connect import KINDS
from playground.engine.sampling import SamplingSettings, validate_settings
from playground.errors import Cancelled, PlaygroundError
from playground.models import ModelRegistry, model_key
from playground.ui.common import as_number, parse_seed
from playground.ui.i18n import i18n, localize, t
from playground.ui.model_picker import LoadStatus, load_lines
from playground.ui.ranges import CheckedNumber

SIDES = ("a", "b")
NO_QUANTIZATION = "none"
SECOND_MODEL = "gemma-3-270m"  # side B's model at first: the other embedded model
MODEL_LABELS = {"a": "compare.model_a", "b": "compare.model_b"}
TEMPERATURE_RANGE = (0.0, 2.0)  # the Chat tab's


@dataclass
class SidesInput:
    """Both sides' controls, as a handler reads them (one API parameter per field)."""

    model_a: str
    quantize_a: str
    temperature_a: float
    seed_a: str
    model_b: str
    quantize_b: str
    temperature_b: float
    seed_b: str


@dataclass(frozen=True)
class SideChoice:
    """One side as asked for: a model, its weights, how it samples."""

    letter: str  # "a" or "b"
    model: str
    quantize: str | None
    settings: SamplingSettings
    seed: int | None

    @property
    def key(self) -> str:
        """The name the registry holds it under ('smollm2-135m-instruct@int8')."""
        return model_key(self.model, self.quantize)

    def describe(self, lang: str) -> str:
        """'A: gemma-3-270m · temperature 0.7 · seed 1'."""
        seed = t("compare.side.seed", lang, seed=self.seed) if self.seed is not None else ""
        return t(
            "compare.side.describe",
            lang,
            side=self.letter.upper(),
            model=self.key,
            temperature=self.settings.temperature,
            seed=seed,
        )


def read_sides(sides: SidesInput) -> list[SideChoice]:
    """Both sides' controls checked; a bad value is named (nothing runs then)."""
    return [_read_side(sides, letter) for letter in SIDES]


def _read_side(sides: SidesInput, letter: str) -> SideChoice:
    def value(name: str) -> Any:
        return getattr(sides, f"{name}_{letter}")

    model = str(value("model") or "").strip()
    if not model:
        raise PlaygroundError(
            "Side {side} has no model: pick one.", key="compare.error.no_model", side=letter.upper()
        )
    quantize = str(value("quantize") or NO_QUANTIZATION).strip().lower()
    if quantize not in (NO_QUANTIZATION, *SERVING_FORMATS):
        raise PlaygroundError(
            "Side {side}: unknown weights {value!r}: use one of {allowed}.",
            key="compare.error.quantize",
            side=letter.upper(),
            value=quantize,
            allowed=", ".join((NO_QUANTIZATION, *SERVING_FORMATS)),
        )
    temperature = as_number(value("temperature"), f"temperature {letter.upper()}")
    settings = validate_settings({"temperature": temperature})
    seed = parse_seed(value("seed"))
    return SideChoice(letter, model, None if quantize == NO_QUANTIZATION else quantize, settings, seed)


class SideEngines:
    """The engines of one run, loaded side by side and held in the registry until `close` (a side
    that could not load has its reason instead)."""

    def __init__(self, registry: ModelRegistry, choices: Sequence[SideChoice], lang: str) -> None:
        self.registry, self.choices, self.lang = registry, list(choices), lang
        self.engines: list[Engine | None] = [None] * len(self.choices)
        self.errors: list[str] = [""] * len(self.choices)
        self._held: list[str] = []

    def load(self, control: Control | None = None) -> Iterator[dict[str, Any]]:
        """Load each side in turn: its status line ("status_a") as it goes."""
        for index, choice in enumerate(self.choices):
            status = LoadStatus(choice.key, self.lang)
            out = f"status_{choice.letter}"
            try:
                for item in load_lines(self.registry, choice.model, choice.quantize):
                    status.add(item)
                    if status.estimate:  # a load (a loaded model is ready at once: nothing to show)
                        yield {out: status.markdown()}
                    if control is not None:
                        control.check()
                self.engines[index] = self.registry.hold(choice.key)
                self._held.append(choice.key)
            except Cancelled:
                raise
            except PlaygroundError as exc:
                self.errors[index] = localize(exc.message, self.lang)
                yield {out: t("compare.side.not_loaded", self.lang, why=self.errors[index])}
                continue
            yield {out: ""}  # ready: its column's title names it

    @property
    def ready(self) -> list[int]:
        """The sides that have an engine."""
        return [i for i, engine in enumerate(self.engines) if engine is not None]

    def close(self) -> None:
        """Let go of the engines (the registry may unload them again)."""
        for key in self._held:
            self.registry.let_go(key)
        self._held = []


# --- layout -------------------------------------------------------------------------------------


def build_sides(w: dict[str, Any], choices: list[tuple[str, str]], first: str) -> None:
    """The two sides' columns: model, weights, temperature, seed, and a status line each."""
    with gr.Row(elem_id="compare-sides"):
        for letter, model in zip(SIDES, (first, SECOND_MODEL), strict=True):
            with gr.Column(elem_classes=["compare-side"], min_width=300):
                _side_controls(w, letter, choices, model)


def _side_controls(w: dict[str, Any], letter: str, choices: list[tuple[str, str]], model: str) -> None:
    """One row: the model (a name may be typed), its weights, its temperature and seed."""
    with gr.Row(equal_height=True):
        w[f"model_{letter}"] = gr.Dropdown(
            choices if model in {c[1] for c in choices} else [*choices, (model, model)],
            value=model,
            label=i18n(MODEL_LABELS[letter]),
            allow_custom_value=True,
            scale=3,
            min_width=180,
            elem_id=f"compare-model-{letter}",
        )
        w[f"quantize_{letter}"] = gr.Dropdown(
            [NO_QUANTIZATION, *SERVING_FORMATS],
            value=NO_QUANTIZATION,
            label=i18n("compare.quantize"),
            scale=1,
            min_width=90,
            elem_id=f"compare-quantize-{letter}",
        )
        w[f"temperature_{letter}"] = CheckedNumber(
            0,
            label=i18n("compare.temperature"),
            minimum=TEMPERATURE_RANGE[0],
            maximum=TEMPERATURE_RANGE[1],
            step=0.1,
            scale=1,
            min_width=120,
            elem_id=f"compare-temperature-{letter}",
        )
        w[f"seed_{letter}"] = gr.Textbox(
            "",
            label=i18n("compare.seed"),
            placeholder=i18n("compare.seed.info"),
            scale=1,
            min_width=100,
            elem_id=f"compare-seed-{letter}",
        )
    w[f"status_{letter}"] = gr.Markdown(
        "", elem_id=f"compare-status-{letter}", elem_classes=["compare-status"]
    )


def side_columns(
    w: dict[str, Any], build: Callable[[str], dict[str, Any]], elem_id: str | None = None
) -> None:
    """A view's results: one column per side, side by side; build(letter) makes a column's
    components (by name, in order)."""
    with gr.Row(elem_id=elem_id):
        for letter in SIDES:
            with gr.Column(min_width=300, elem_classes=["compare-column"]):
                w.update(build(letter))


def titled_view(view: str, letter: str) -> dict[str, Any]:
    """A column's usual components: its side's title, the view's HTML, a summary line
    ("tokens_a_title", "tokens_a_view", "tokens_a_summary")."""
    return {
        f"{view}_{letter}_title": gr.Markdown(""),
        f"{view}_{letter}_view": gr.HTML("", elem_id=f"compare-{view}-{letter}-view"),
        f"{view}_{letter}_summary": gr.Markdown("", elem_id=f"compare-{view}-{letter}-summary"),
    }


def remote_allowed() -> bool:
    """Connecting a server is offered except on a Hugging Face Space (SPACE_ID set): there a visitor
    would make the Space's server open connections to addresses of their choice."""
    return not os.environ.get("SPACE_ID")


def build_remote(w: dict[str, Any]) -> None:
    """A server (llama-server, vLLM, SGLang) connected as a model either side can pick."""
    with gr.Accordion(
        i18n("compare.remote"), open=False, visible=remote_allowed(), elem_classes=["stage-hide"]
    ):
        with gr.Row():
            w["remote_kind"] = gr.Dropdown(
                list(KINDS), value=KINDS[0], label=i18n("compare.remote.kind"), scale=1
            )
            w["remote_url"] = gr.Textbox(
                "http://127.0.0.1:8080",
                label=i18n("compare.remote.url"),
                scale=2,
                elem_id="compare-remote-url",
            )
            w["remote_name"] = gr.Textbox(
                "", label=i18n("compare.remote.name"), info=i18n("compare.remote.name.info"), scale=2
            )
            w["remote_connect"] = gr.Button(
                i18n("compare.remote.connect"), scale=1, elem_id="compare-remote-connect"
            )
        w["remote_status"] = gr.Markdown("", elem_id="compare-remote-status")
