"""KV-cache memory tab: exact bytes per layer, what fits on a GPU, and measured vs predicted.

Handlers stay thin: the numbers come from playground.kv, the figures from playground.plots.kv.
Every calculation is pure arithmetic (no model queue); only "measure" runs the loaded model.
"""

from __future__ import annotations

import contextvars
import functools
import json
from collections.abc import Callable
from typing import Any

import gradio as gr

from playground import kv as kvm
from playground.engine.base import Engine
from playground.errors import PlaygroundError
from playground.kv.presets import COMPARISON_MODELS, PRESETS
from playground.plots.kv import CurveSeries, kv_curve_figure, memory_bar_figure
from playground.ui.common import as_number, as_whole, connect, table_rows, warn
from playground.ui.i18n import i18n, localize, session_lang, t
from playground.ui.kv_measured_quant import (
    QUANT_TABLE_HEADERS,
    build_quantized_measure,
    wire_quantized_measure,
)
from playground.ui.kv_text import (
    MODE_NAMES,
    formula_markdown,
    kind_name,
    layer_rows,
    measured_text,
    model_dtype_name,
    server_kv_text,
    summary_markdown,
)
from playground.ui.links import Link, link_opener
from playground.ui.ranges import CheckedSlider, UncheckedNumber
from playground.workspace import Workspaces

LOADED = "Loaded model"  # the choice's value (links say preset=Loaded model); its label is translated
GPU_CHOICES = [
    ("16 GB · T4, V100-16", 16),
    ("24 GB · RTX 4090, L4, A10", 24),
    ("40 GB · A100-40", 40),
    ("48 GB · L40S, A6000", 48),
    ("80 GB · A100-80, H100", 80),
    ("94 GB · H100 NVL", 94),
    ("141 GB · H200", 141),
    ("192 GB · B200, MI300X", 192),
]
OTHER_DTYPES = ("float16", "fp8", "q4_0")  # drawn dashed for the selected model
# Table headers (a Dataframe's headers are not translated in the browser: the server sets them)
LAYER_HEADERS = ["kv.col.layer", "kv.col.kind", "kv.col.kv_heads", "kv.col.k_dim", "kv.col.v_dim"]
LAYER_HEADERS += ["kv.col.tokens", "kv.col.bytes"]
MEASURE_HEADERS = ["kv.col.layer", "kv.col.kind", "kv.col.predicted", "kv.col.measured", "kv.col.equal"]


def headers(keys: list[str], lang: str = "en") -> list[str]:
    return [t(key, lang) for key in keys]


def preset_choices(lm: Engine | None = None) -> list[str]:
    """The presets, after the loaded model when its config is known here (a served one may not be)."""
    return [LOADED, *PRESETS] if lm is None or loaded_config(lm) else list(PRESETS)


def preset_labels(lm: Engine | None = None) -> list[tuple[Any, str]]:
    """The Model dropdown's choices: (label, value), the loaded model's label translated."""
    return [(i18n("kv.preset.loaded") if name == LOADED else name, name) for name in preset_choices(lm)]


def default_preset(lm: Engine) -> str:
    return preset_choices(lm)[0]


def loaded_config(lm: Engine) -> dict[str, Any]:
    """The loaded model's full config as a plain config.json dict ({} when a serving engine's model
    config is not available here)."""
    return json.loads(lm.config.to_json_string(use_diff=False)) if lm.config is not None else {}


def weights_dtype_default(lm: Engine, preset: str, lang: str = "en") -> tuple[str, str]:
    """Default weights dtype and its info line: the loaded model's own dtype, else bfloat16 for presets."""
    if preset == LOADED:
        name = model_dtype_name(lm)
        return name, t("kv.weights_dtype.loaded", lang, dtype=name, model=lm.name)
    return "bfloat16", t("kv.weights_dtype.preset", lang)


def weights_dtype_update(lm: Engine, preset: str, lang: str = "en") -> Any:
    """Handler: reset the weights dtype dropdown when the model changes (as loaded for the loaded model)."""
    value, info = weights_dtype_default(lm, preset, lang)
    return gr.Dropdown(choices=list(kvm.KV_DTYPES), value=value, info=info)


def preset_config_text(lm: Engine, name: str) -> str:
    """The JSON text shown in the editor for a preset (or the loaded model)."""
    if name == LOADED:
        return json.dumps(loaded_config(lm), indent=2)
    if name not in PRESETS:
        raise PlaygroundError(
            "Unknown preset {name!r}: pick one from the list.", key="kv.error.preset", name=name
        )
    return json.dumps(PRESETS[name].config, indent=2)


def parameter_count(
    lm: Engine, preset: str, config: dict[str, Any], params_b: float | str | None, lang: str = "en"
) -> tuple[int, str]:
    """Weights' parameter count and where it came from: typed in, the loaded model, a preset, or estimated."""
    if params_b is not None and str(params_b).strip():  # blank: counted or estimated below
        billions = as_number(params_b, t("kv.field.params_b", lang))
        if billions <= 0:
            raise PlaygroundError(
                "Parameters must be positive, got {value!r} billion.", key="kv.error.params", value=params_b
            )
        return int(billions * 1e9), t("kv.params.entered", lang)
    if preset == LOADED and config == loaded_config(lm) and lm.num_parameters:
        return lm.num_parameters, t("kv.params.counted", lang)
    if preset in PRESETS and config == PRESETS[preset].config:
        return PRESETS[preset].num_parameters, t("kv.params.published", lang, preset=preset)
    return kvm.estimate_parameters(config), t("kv.params.estimated", lang)


def curve_figure(
    config: dict[str, Any], label: str, seq_len: int, batch: int, dtype: str, mode: str, lang: str = "en"
) -> Any:
    """The selected model in its dtype (solid) and other dtypes (dashed), plus well-known models."""
    configs = [config, *(PRESETS[n].config for n in COMPARISON_MODELS)]
    windows = {w for c in configs for layer in kvm.kv_geometry(c, mode).layers if (w := layer.window)}
    lengths = kvm.curve_lengths(max(2 * seq_len, 8192), windows)
    series = [CurveSeries(f"{label} · {dtype}", lengths, kvm.kv_curve(config, lengths, batch, dtype, mode))]
    for other in (d for d in OTHER_DTYPES if d != dtype):
        series.append(
            CurveSeries(
                f"{label} · {other}", lengths, kvm.kv_curve(config, lengths, batch, other, mode), "dash"
            )
        )
    for name in (n for n in COMPARISON_MODELS if n != label):
        cfg = PRESETS[name].config
        series.append(
            CurveSeries(f"{name} · {dtype}", lengths, kvm.kv_curve(cfg, lengths, batch, dtype, mode), "dot")
        )
    return kv_curve_figure(series, marker_tokens=seq_len, lang=lang)


# --- handlers (thin: parse, call the engine, format) ---------------------------------------------------

CALCULATOR_OUTPUTS = ["summary", "formula", "layers", "curves", "bars"]


def calculate(
    lm: Engine,
    preset: str,
    config_text: str,
    seq_len: float,
    batch: float,
    kv_dtype: str,
    mode: str,
    gpu_gb: float,
    weights_dtype: str,
    params_b: float | None,
    overhead_pct: float,
    lang: str = "en",
) -> dict[str, Any]:
    """Everything the calculator shows for one set of inputs, in lang: summary, formula, layers, two
    figures."""
    config = kvm.as_config_dict(config_text or "")
    seq, sequences = _whole(seq_len, "kv.field.seq_len", lang), _whole(batch, "kv.field.batch", lang)
    b = kvm.kv_cache_breakdown(config, seq, sequences, kv_dtype, mode)
    params, source = parameter_count(lm, preset, config, params_b, lang)
    weights = kvm.weights_bytes(params, weights_dtype)
    gpu = int(kvm.memory_gb(gpu_gb) * kvm.GB)
    fit = kvm.fit_on_gpu(config, gpu, weights, b.seq_len, b.batch_size, kv_dtype, mode, overhead_pct / 100)
    known = preset in PRESETS and config == PRESETS[preset].config
    label = preset if known else t("kv.this_config", lang)
    return {
        "summary": summary_markdown(b, params, source, weights_dtype, fit, lang),
        "formula": formula_markdown(b, lang),
        "layers": layer_rows(b, lang),
        "curves": curve_figure(config, label, b.seq_len, b.batch_size, b.dtype.name, mode, lang),
        "bars": memory_bar_figure(label, weights, b.total_bytes, fit.overhead_bytes, gpu, lang),
    }


# False while a recalculation the person did not ask for runs (see quietly).
_TOASTS: contextvars.ContextVar[bool] = contextvars.ContextVar("kv_toasts", default=True)


def refused(exc: PlaygroundError, lang: str = "en") -> dict[str, Any]:
    """The calculator after a user error (bad JSON, bad size): the summary says why (and a toast,
    unless quietly), and the last good result stays on screen, marked stale (static/app.css, by the
    summary's note), until a calculation succeeds."""
    why = localize(exc.message, lang)
    if _TOASTS.get():
        warn(why, lang)
    note = f"<span class='kv-stale-note'>{t('kv.stale', lang)}</span>"
    return {"summary": f"{t('kv.cant_calculate', lang, why=why)}\n\n{note}"}


def quietly(calculator: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """The calculator for a recalculation the person did not ask for (the tab picked another model,
    the page another language): a value refused gives no toast again (it was told when typed); the
    summary still says why."""

    @functools.wraps(calculator)
    def recalculate(*args: Any, **kwargs: Any) -> dict[str, Any]:
        token = _TOASTS.set(False)
        try:
            return calculator(*args, **kwargs)
        finally:
            _TOASTS.reset(token)

    return recalculate


CALCULATOR_INPUTS = [
    "preset",
    "config_text",
    "seq_len",
    "batch",
    "kv_dtype",
    "mode",
    "gpu_gb",
    "weights_dtype",
    "params_b",
    "overhead_pct",
]
# What the page's language changes in this tab besides the calculator (KVHandlers.kv_texts)
TEXT_OUTPUTS = ["measure_intro", "weights_dtype", "layers", "measure_table", "measure_quant_table"]


class KVHandlers:
    """The tab's handlers, in the session's language; only `kv_measure` runs the model."""

    def __init__(self, engine: Engine, workspaces: Workspaces | None = None) -> None:
        self.engine = engine  # the app's own model; a tab's own (workspaces) where it picked another
        self.workspaces = workspaces
        self.kv_recalculate = quietly(self.kv_calculate)
        # Page load: a shared link's values on the controls, and what they calculate (a value of the
        # link refused is told). Without a link, the controls as shown, in the page's language, with
        # no toast: a value typed before the page settled is told by its own event.
        self.kv_from_link = link_opener("kv", self.kv_recalculate, self._open_link, default=True)

    def kv_calculate(
        self,
        preset: str,
        config_text: str,
        seq_len: float,
        batch: float,
        kv_dtype: str,
        mode: str,
        gpu_gb: float,
        weights_dtype: str,
        params_b: float | None,
        overhead_pct: float,
        request: gr.Request = None,
    ) -> dict[str, Any]:
        """The calculator for one set of inputs, for the model (see calculate); a user error is told
        (see refused) and the last good result stays, marked stale."""
        lang = session_lang(request)
        inputs = (preset, config_text, seq_len, batch, kv_dtype, mode, gpu_gb, weights_dtype, params_b)
        try:
            return calculate(self.engine_of(request), *inputs, overhead_pct, lang)
        except PlaygroundError as exc:
            return refused(exc, lang)

    def _open_link(self, link: Link, values: dict[str, Any], request: Any = None) -> dict[str, Any]:
        """A shared link to a calculation (kv_from_link): its model's config (and, as choosing the
        model does, its weights dtype unless the link sets one), and the result."""
        lang, lm = session_lang(request), self.engine_of(request)
        views = {}
        if "preset" in link.values:
            views["config_text"] = values["config_text"] = preset_config_text(lm, values["preset"])
        if "preset" in link.values and "weights_dtype" not in link.values:
            views["weights_dtype"] = weights_dtype_update(lm, values["preset"], lang)
            values["weights_dtype"] = weights_dtype_default(lm, values["preset"])[0]
        # quiet: a link's bad value is told when the link is read; a control's, by its own event
        return {**views, **self.kv_recalculate(**values, request=request)}

    def kv_texts(
        self, preset: str, measure_table: Any, measure_quant_table: Any, request: gr.Request = None
    ) -> dict[str, Any]:
        """What the page's language changes here besides the calculator: the measurement's
        explanation, the weights dtype's info, the tables' headers (a measured table keeps its rows)."""
        lang, lm = session_lang(request), self.engine_of(request)
        return {
            "measure_intro": measure_intro(lm, lang),
            "weights_dtype": gr.Dropdown(info=weights_dtype_default(lm, preset, lang)[1]),
            "layers": gr.Dataframe(headers=headers(LAYER_HEADERS, lang)),
            "measure_table": gr.Dataframe(table_rows(measure_table), headers=headers(MEASURE_HEADERS, lang)),
            "measure_quant_table": gr.Dataframe(
                table_rows(measure_quant_table), headers=headers(QUANT_TABLE_HEADERS, lang)
            ),
        }

    def kv_preset_config(self, preset: str, request: gr.Request = None) -> str:
        """The config.json text of a preset (or of the loaded model)."""
        return preset_config_text(self.engine_of(request), preset)

    def kv_model_changed(self, preset: str, request: gr.Request = None) -> dict[str, Any]:
        """The tab picked another model: the "Loaded model" preset is that model now (its config and
        dtype); another preset, or a config typed in, stays as it is."""
        if preset != LOADED:
            return {}
        return {
            "config_text": self.kv_preset_config(preset, request),
            **self.kv_weights_dtype(preset, request),
        }

    def kv_weights_dtype(self, preset: str, request: gr.Request = None) -> dict[str, Any]:
        return {"weights_dtype": weights_dtype_update(self.engine_of(request), preset, session_lang(request))}

    def kv_load_config(self, config_path: str) -> str:
        """Read a config.json (local path, model directory, or Hub id when online) into the editor."""
        return json.dumps(kvm.load_config_file(config_path), indent=2)

    def kv_measure(self, measure_length: float, request: gr.Request = None) -> dict[str, Any]:
        """Build a real cache with the loaded model and put its bytes next to the prediction."""
        text, rows = measure(self.engine_of(request), measure_length, session_lang(request))
        return {"measured": text, "measure_table": rows}

    def engine_of(self, request: Any) -> Engine:
        """The model this browser tab uses (the app's own until it picks another)."""
        if self.workspaces is None:
            return self.engine
        return self.workspaces.get(getattr(request, "session_hash", None)).engine


def measure(lm: Engine, prompt_len: float, lang: str = "en") -> tuple[str, list[list[Any]]]:
    """Build a real cache with the loaded model and put its bytes next to the prediction (a serving
    engine: its own KV figures next to the prediction for them)."""
    if not lm.capabilities.cache_bytes:
        return server_kv_text(lm, lang), []
    n = _whole(prompt_len, "kv.field.prompt_length", lang)
    if n > lm.context_length:
        raise PlaygroundError(
            "Prompt length {n:,} exceeds the model's context of {context:,} tokens.",
            key="kv.error.past_context",
            n=n,
            context=lm.context_length,
        )
    m = kvm.measure_vs_predicted(lm, n, 1)
    rows = [
        [p.index, kind_name(p.kind, lang), p.bytes, measured, p.bytes == measured]
        for p, measured in zip(m.predicted.layers, m.measured_layers, strict=False)
    ]
    return measured_text(lm, n, m, lang), rows


def _whole(value: float | None, name_key: str, lang: str) -> int:
    """A positive whole number, or the error that names the setting (in lang)."""
    name = t(name_key, lang)
    try:
        number = as_whole(value, name)
    except PlaygroundError:
        number = 0  # not a whole number: the same message as for zero
    if number <= 0:
        raise PlaygroundError(
            "{name} must be a positive whole number, got {value!r}.",
            key="kv.error.not_positive",
            name=name,
            value=value,
        )
    return number


def measure_intro(lm: Engine, lang: str = "en") -> str:
    """What "Build a real cache" does, for this model and its dtype."""
    return t("kv.measure.intro", lang, name=lm.name, dtype=model_dtype_name(lm))


# --- layout ------------------------------------------------------------------------------------------


def build_kv_tab(lm: Engine, workspaces: Workspaces | None = None) -> tuple[dict[str, Any], KVHandlers]:
    """The KV-cache calculator tab (called inside a gr.Tab); returns its components by name and handlers.
    Its text built on the server is English here: the page's load event says it in the page's language."""
    gr.Markdown(i18n("kv.intro"), elem_classes=["stage-hide"])
    w: dict[str, Any] = {}
    with gr.Row():
        with gr.Column(scale=1):
            _config_inputs(lm, w)
            _size_inputs(w)
            _gpu_inputs(lm, w)
            w["run"] = gr.Button(i18n("kv.calculate"), variant="primary")
        with gr.Column(scale=2, elem_id="kv-results"):
            first = calculate(lm, *(w[name].value for name in CALCULATOR_INPUTS))
            w["summary"] = gr.Markdown(first["summary"], elem_id="kv-summary")
            w["curves"] = gr.Plot(first["curves"], label=i18n("kv.curves"), elem_id="kv-curves")
            w["bars"] = gr.Plot(first["bars"], label=i18n("kv.bars"), elem_id="kv-bars")
            w["formula"] = gr.Markdown(first["formula"], elem_id="kv-formula", elem_classes=["stage-hide"])
            w["layers"] = gr.Dataframe(
                first["layers"],
                headers=headers(LAYER_HEADERS),
                label=i18n("kv.layers"),
                interactive=False,
                elem_id="kv-layers",
                elem_classes=["stage-hide"],
            )
    _measure_section(lm, w)
    handlers = KVHandlers(lm, workspaces)
    _wire(handlers, w)
    return w, handlers


def _config_inputs(lm: Engine, w: dict[str, Any]) -> None:
    w["preset"] = gr.Dropdown(
        preset_labels(lm),
        value=default_preset(lm),
        label=i18n("kv.preset"),
        info=i18n("kv.preset.info"),
        elem_id="kv-preset",
    )
    with gr.Accordion(i18n("kv.config"), open=False, elem_classes=["stage-hide"]):
        w["config_text"] = gr.Code(
            value=preset_config_text(lm, default_preset(lm)),
            language="json",
            label="config.json",
            lines=12,
            max_lines=24,
        )
        with gr.Row():
            w["config_path"] = gr.Textbox(
                label=i18n("kv.config_path"),
                info=i18n("kv.config_path.info"),
                scale=3,
                elem_id="kv-config-path",
            )
            w["load"] = gr.Button(i18n("kv.load"), scale=1, elem_id="kv-load")


def _size_inputs(w: dict[str, Any]) -> None:
    """Length, batch, dtype and mode inputs."""
    w["seq_len"] = UncheckedNumber(
        4096,
        label=i18n("kv.seq_len"),
        precision=0,
        minimum=1,
        info=i18n("kv.seq_len.info"),
        elem_id="kv-seq-len",
    )
    w["batch"] = UncheckedNumber(
        1, label=i18n("kv.batch"), precision=0, minimum=1, info=i18n("kv.batch.info")
    )
    w["kv_dtype"] = gr.Dropdown(
        list(kvm.KV_DTYPES), value="float16", label=i18n("kv.kv_dtype"), info=i18n("kv.kv_dtype.info")
    )
    w["mode"] = gr.Radio(
        [(i18n(MODE_NAMES[mode]), mode) for mode in kvm.MODES],
        value="ideal",
        label=i18n("kv.mode"),
        info=i18n("kv.mode.info"),
    )


def _gpu_inputs(lm: Engine, w: dict[str, Any]) -> None:
    """GPU size, weights dtype (first paint: the loaded model's own), parameters and overhead."""
    w["gpu_gb"] = gr.Dropdown(
        GPU_CHOICES,
        value=80,
        label=i18n("kv.gpu"),
        allow_custom_value=True,
        info=i18n("kv.gpu.info"),
        elem_id="kv-gpu",
    )
    wdtype, winfo = weights_dtype_default(lm, default_preset(lm))
    w["weights_dtype"] = gr.Dropdown(
        list(kvm.KV_DTYPES), value=wdtype, label=i18n("kv.weights_dtype"), info=winfo
    )
    w["params_b"] = gr.Textbox(
        "",
        label=i18n("kv.params_b"),
        placeholder=i18n("kv.params_b.placeholder"),
        info=i18n("kv.params_b.info"),
    )
    w["overhead_pct"] = CheckedSlider(
        0, 50, value=10, step=1, label=i18n("kv.overhead"), info=i18n("kv.overhead.info")
    )


def _wire(h: KVHandlers, w: dict[str, Any]) -> None:
    """One calculator event for every trigger; none of it needs the model queue. A chosen preset first
    fills the config and resets the weights dtype, then calculates. Only "measure" runs the model."""
    quick = {"model": False}
    triggers = [
        w["run"].click,
        w["seq_len"].submit,
        w["batch"].submit,
        w["params_b"].submit,
        w["overhead_pct"].release,
    ]
    # .input: what a person changes (a preset's dtype or a link's values set by code would calculate twice)
    triggers += [w[name].input for name in ("kv_dtype", "mode", "gpu_gb", "weights_dtype")]
    connect(triggers, h.kv_calculate, w, CALCULATOR_OUTPUTS, api_name="kv_calculate", **quick)
    # .select fires on every choice, re-choosing the same preset too (.change would not)
    chosen = connect(
        w["preset"].select, h.kv_preset_config, w, ["config_text"], api_name="kv_preset_config", **quick
    )
    dtype = connect(chosen.success, h.kv_weights_dtype, w, ["weights_dtype"], api_name=None, **quick)
    loaded = connect(
        w["load"].click, h.kv_load_config, w, ["config_text"], api_name="kv_load_config", **quick
    )
    for event in (dtype, loaded):
        connect(event.success, h.kv_calculate, w, CALCULATOR_OUTPUTS, api_name=None, **quick)
    measured = ["measured", "measure_table"]
    connect(w["measure"].click, h.kv_measure, w, measured, api_name="kv_measure", status="measured")
    wire_quantized_measure(h.engine_of, w)


def _measure_section(lm: Engine, w: dict[str, Any]) -> None:
    with gr.Accordion(i18n("kv.measure"), open=True, elem_classes=["stage-hide"]):
        w["measure_intro"] = gr.Markdown(measure_intro(lm))
        with gr.Row():
            w["measure_length"] = CheckedSlider(
                1,
                min(2048, lm.context_length),
                value=128,
                step=1,
                label=i18n("kv.measure_length"),
                info=i18n("kv.measure_length.info"),
            )
            w["measure"] = gr.Button(i18n("kv.measure.run"), variant="secondary", elem_id="kv-measure")
        w["measured"] = gr.Markdown(elem_id="kv-measured")
        w["measure_table"] = gr.Dataframe(
            headers=headers(MEASURE_HEADERS), label=i18n("kv.measure_table"), interactive=False
        )
        build_quantized_measure(lm, w)
