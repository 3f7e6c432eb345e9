"""KV-cache memory tab: exact bytes per layer, what fits on a GPU, and measured vs predicted.

Handlers stay thin: the numbers come from playground.kv, the figures from playground.plots.kv.
Every calculation is pure arithmetic (no model queue); only "measure" runs the loaded model.
"""

from __future__ import annotations

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
from playground.ui.common import as_number, as_whole, connect
from playground.ui.kv_measured_quant import build_quantized_measure, wire_quantized_measure
from playground.ui.kv_text import (
    formula_markdown,
    layer_rows,
    measured_text,
    model_dtype_name,
    server_kv_text,
    summary_markdown,
)
from playground.ui.links import Link, link_opener
from playground.ui.ranges import CheckedSlider, UncheckedNumber

LOADED = "Loaded model"
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
LAYER_HEADERS = ["layer", "kind", "KV heads", "K dim", "V dim", "tokens held", "bytes"]
WEIGHTS_INFO = "Weights take parameters × bytes per parameter next to the cache."
MEASURE_HEADERS = ["layer", "kind", "predicted bytes", "measured bytes", "equal"]
# A refused calculation: the reason, and a note that marks the last good result below as stale.
REFUSED = (
    "**Can't calculate:** {why}\n\n<span class='kv-stale-note'>The formula, figures and table below are "
    "the last good calculation, marked stale, until one succeeds.</span>"
)


def preset_choices(lm: Engine | None = None) -> list[str]:
    """The presets, after the loaded model when its config is known here (a served one may not be)."""
    return [LOADED, *PRESETS] if lm is None or loaded_config(lm) else list(PRESETS)


def default_preset(lm: Engine) -> str:
    return preset_choices(lm)[0]


def loaded_config(lm: Engine) -> dict[str, Any]:
    """The loaded model's full config as a plain config.json dict ({} when a serving engine's model
    config is not available here)."""
    return json.loads(lm.config.to_json_string(use_diff=False)) if lm.config is not None else {}


def weights_dtype_default(lm: Engine, preset: str) -> tuple[str, str]:
    """Default weights dtype and its info line: the loaded model's own dtype, else bfloat16 for presets."""
    if preset == LOADED:
        name = model_dtype_name(lm)
        return name, f"As loaded: {name} ({lm.name} runs in it here). {WEIGHTS_INFO}"
    return "bfloat16", f"bfloat16: how most checkpoints are published. {WEIGHTS_INFO}"


def weights_dtype_update(lm: Engine, preset: str) -> Any:
    """Handler: reset the weights dtype dropdown when the model changes (as loaded for the loaded model)."""
    value, info = weights_dtype_default(lm, preset)
    return gr.Dropdown(choices=list(kvm.KV_DTYPES), value=value, info=info)


def preset_config_text(lm: Engine, name: str) -> str:
    """The JSON text shown in the editor for a preset (or the loaded model)."""
    if name == LOADED:
        return json.dumps(loaded_config(lm), indent=2)
    if name not in PRESETS:
        raise PlaygroundError(f"Unknown preset {name!r}: pick one from the list.")
    return json.dumps(PRESETS[name].config, indent=2)


def parameter_count(
    lm: Engine, preset: str, config: dict[str, Any], params_b: float | str | None
) -> tuple[int, str]:
    """Weights' parameter count and where it came from: typed in, the loaded model, a preset, or estimated."""
    if params_b is not None and str(params_b).strip():  # blank: counted or estimated below
        billions = as_number(params_b, "Parameters (billions)")
        if billions <= 0:
            raise PlaygroundError(f"Parameters must be positive, got {params_b!r} billion.")
        return int(billions * 1e9), "as entered"
    if preset == LOADED and config == loaded_config(lm) and lm.num_parameters:
        return lm.num_parameters, "counted on the loaded model"
    if preset in PRESETS and config == PRESETS[preset].config:
        return PRESETS[preset].num_parameters, f"published count of {preset}"
    return kvm.estimate_parameters(config), "estimated from the config (embeddings, attention, MLP)"


def curve_figure(config: dict[str, Any], label: str, seq_len: int, batch: int, dtype: str, mode: str) -> Any:
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
    return kv_curve_figure(series, marker_tokens=seq_len)


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
) -> dict[str, Any]:
    """Everything the calculator shows for one set of inputs: summary, formula, layers, two figures."""
    config = kvm.as_config_dict(config_text or "")
    b = kvm.kv_cache_breakdown(
        config, _whole(seq_len, "Sequence length"), _whole(batch, "Batch"), kv_dtype, mode
    )
    params, source = parameter_count(lm, preset, config, params_b)
    weights = kvm.weights_bytes(params, weights_dtype)
    gpu = int(kvm.memory_gb(gpu_gb) * kvm.GB)
    fit = kvm.fit_on_gpu(config, gpu, weights, b.seq_len, b.batch_size, kv_dtype, mode, overhead_pct / 100)
    label = preset if preset in PRESETS and config == PRESETS[preset].config else "this config"
    return {
        "summary": summary_markdown(b, params, source, weights_dtype, fit),
        "formula": formula_markdown(b),
        "layers": layer_rows(b),
        "curves": curve_figure(config, label, b.seq_len, b.batch_size, b.dtype.name, mode),
        "bars": memory_bar_figure(label, weights, b.total_bytes, fit.overhead_bytes, gpu),
    }


def explained(calc: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """The calculator as a handler: a user error (bad JSON, bad size) is told in the summary and as a
    toast; the last good result stays on screen, marked stale (static/app.css, by the summary's note),
    until a calculation succeeds."""

    @functools.wraps(calc)
    def kv_calculate(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return calc(*args, **kwargs)
        except PlaygroundError as exc:
            gr.Warning(str(exc))
            return {"summary": REFUSED.format(why=exc)}

    return kv_calculate


class KVHandlers:
    """The tab's handlers; only `kv_measure` runs the model."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # The calculator for one set of inputs (calculate's, but for the model), its user errors explained.
        self.kv_calculate = explained(functools.partial(calculate, engine))
        # Page load: a shared link's values on the controls, and what they calculate.
        self.kv_from_link = link_opener("kv", self.kv_calculate, self._open_link)

    def _open_link(self, link: Link, values: dict[str, Any], request: Any = None) -> dict[str, Any]:
        """A shared link to a calculation (kv_from_link): its model's config (and, as choosing the
        model does, its weights dtype unless the link sets one), and the result."""
        views = {}
        if "preset" in link.values:
            views["config_text"] = values["config_text"] = preset_config_text(self.engine, values["preset"])
        if "preset" in link.values and "weights_dtype" not in link.values:
            views["weights_dtype"] = weights_dtype_update(self.engine, values["preset"])
            values["weights_dtype"] = weights_dtype_default(self.engine, values["preset"])[0]
        return {**views, **self.kv_calculate(**values)}

    def kv_preset_config(self, preset: str) -> str:
        """The config.json text of a preset (or of the loaded model)."""
        return preset_config_text(self.engine, preset)

    def kv_weights_dtype(self, preset: str) -> dict[str, Any]:
        return {"weights_dtype": weights_dtype_update(self.engine, preset)}

    def kv_load_config(self, config_path: str) -> str:
        """Read a config.json (local path, model directory, or Hub id when online) into the editor."""
        return json.dumps(kvm.load_config_file(config_path), indent=2)

    def kv_measure(self, measure_length: float) -> dict[str, Any]:
        """Build a real cache with the loaded model and put its bytes next to the prediction."""
        text, rows = measure(self.engine, measure_length)
        return {"measured": text, "measure_table": rows}


def measure(lm: Engine, prompt_len: float) -> tuple[str, list[list[Any]]]:
    """Build a real cache with the loaded model and put its bytes next to the prediction (a serving
    engine: its own KV figures next to the prediction for them)."""
    if not lm.capabilities.cache_bytes:
        return server_kv_text(lm), []
    n = _whole(prompt_len, "Prompt length")
    if n > lm.context_length:
        raise PlaygroundError(
            f"Prompt length {n:,} exceeds the model's context of {lm.context_length:,} tokens."
        )
    m = kvm.measure_vs_predicted(lm, n, 1)
    rows = [
        [p.index, p.kind, p.bytes, measured, p.bytes == measured]
        for p, measured in zip(m.predicted.layers, m.measured_layers, strict=False)
    ]
    return measured_text(lm, n, m), rows


def _whole(value: float | None, label: str) -> int:
    try:
        number = as_whole(value, label)
    except PlaygroundError:
        number = 0  # not a whole number: the same message as for zero
    if number <= 0:
        raise PlaygroundError(f"{label} must be a positive whole number, got {value!r}.")
    return number


# --- layout ------------------------------------------------------------------------------------------

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


def build_kv_tab(lm: Engine) -> tuple[dict[str, Any], KVHandlers]:
    """The KV-cache calculator tab (called inside a gr.Tab); returns its components by name and handlers."""
    gr.Markdown(
        "How much memory does the KV cache take? Pick a model or paste its `config.json`; every number "
        "below is exact and shows where it came from. GiB = 2^30 bytes, GB = 10^9 bytes.",
        elem_classes=["stage-hide"],
    )
    w: dict[str, Any] = {}
    with gr.Row():
        with gr.Column(scale=1):
            _config_inputs(lm, w)
            _size_inputs(w)
            _gpu_inputs(lm, w)
            w["run"] = gr.Button("Calculate", variant="primary")
        with gr.Column(scale=2, elem_id="kv-results"):
            first = calculate(lm, *(w[name].value for name in CALCULATOR_INPUTS))
            w["summary"] = gr.Markdown(first["summary"], elem_id="kv-summary")
            w["curves"] = gr.Plot(first["curves"], label="KV cache vs context length", elem_id="kv-curves")
            w["bars"] = gr.Plot(first["bars"], label="Weights + KV cache vs GPU memory", elem_id="kv-bars")
            w["formula"] = gr.Markdown(first["formula"], elem_id="kv-formula", elem_classes=["stage-hide"])
            w["layers"] = gr.Dataframe(
                first["layers"],
                headers=LAYER_HEADERS,
                label="Per-layer breakdown",
                interactive=False,
                elem_id="kv-layers",
                elem_classes=["stage-hide"],
            )
    _measure_section(lm, w)
    handlers = KVHandlers(lm)
    _wire(handlers, w)
    return w, handlers


def _config_inputs(lm: Engine, w: dict[str, Any]) -> None:
    w["preset"] = gr.Dropdown(
        preset_choices(lm),
        value=default_preset(lm),
        label="Model",
        info="A preset fills the config.json below; edit it or paste your own, then Calculate.",
    )
    with gr.Accordion("config.json: view, edit, paste or load", open=False, elem_classes=["stage-hide"]):
        w["config_text"] = gr.Code(
            value=preset_config_text(lm, default_preset(lm)),
            language="json",
            label="config.json",
            lines=12,
            max_lines=24,
        )
        with gr.Row():
            w["config_path"] = gr.Textbox(
                label="Local path or Hub id",
                info="A config.json, a model directory, or (online only) a Hub id such as Qwen/Qwen2.5-7B.",
                scale=3,
            )
            w["load"] = gr.Button("Load config", scale=1)


def _size_inputs(w: dict[str, Any]) -> None:
    """Length, batch, dtype and mode inputs."""
    w["seq_len"] = UncheckedNumber(
        4096,
        label="Sequence length (tokens)",
        precision=0,
        minimum=1,
        info="Prompt + generated tokens: every cached layer holds one K and one V per token.",
    )
    w["batch"] = UncheckedNumber(
        1,
        label="Batch",
        precision=0,
        minimum=1,
        info="Sequences decoded together: each keeps its own cache, so bytes scale linearly.",
    )
    w["kv_dtype"] = gr.Dropdown(
        list(kvm.KV_DTYPES),
        value="float16",
        label="KV dtype",
        info="Bytes per cached value; q8_0/q4_0 add a float16 scale per 32 values.",
    )
    w["mode"] = gr.Radio(
        list(kvm.MODES),
        value="ideal",
        label="Mode",
        info="ideal: what an efficient engine must hold; transformers: what its DynamicCache keeps.",
    )


def _gpu_inputs(lm: Engine, w: dict[str, Any]) -> None:
    """GPU size, weights dtype (first paint: the loaded model's own), parameters and overhead."""
    w["gpu_gb"] = gr.Dropdown(
        GPU_CHOICES,
        value=80,
        label="GPU memory (GB = 10^9 B)",
        allow_custom_value=True,
        info="Memory of one GPU as vendors print it; type any other size in GB.",
    )
    wdtype, winfo = weights_dtype_default(lm, default_preset(lm))
    w["weights_dtype"] = gr.Dropdown(list(kvm.KV_DTYPES), value=wdtype, label="Weights dtype", info=winfo)
    w["params_b"] = gr.Textbox(
        "",
        label="Parameters (billions, optional)",
        placeholder="blank: automatic",
        info="Blank: the loaded model's count, a preset's published count, or an estimate.",
    )
    w["overhead_pct"] = CheckedSlider(
        0,
        50,
        value=10,
        step=1,
        label="Overhead reserve (% of GPU)",
        info="Kept free for activations, CUDA context and fragmentation (vLLM uses ~10 %).",
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
    wire_quantized_measure(h.engine, w)


def _measure_section(lm: Engine, w: dict[str, Any]) -> None:
    with gr.Accordion(
        "Measured vs predicted: build a real cache with the loaded model",
        open=True,
        elem_classes=["stage-hide"],
    ):
        gr.Markdown(
            f"Runs **{lm.name}** once over synthetic tokens with `use_cache=True`, sums the bytes of the "
            "cache's key and value tensors, and compares them with the *transformers*-mode prediction. "
            f"The model runs in **{model_dtype_name(lm)}**, so its cache holds {model_dtype_name(lm)} keys "
            "and values and the prediction uses that dtype (not the KV dtype above)."
        )
        with gr.Row():
            w["measure_length"] = CheckedSlider(
                1,
                min(2048, lm.context_length),
                value=128,
                step=1,
                label="Prompt length (tokens)",
                info="Tokens in the forward pass; the cache then holds this many per layer.",
            )
            w["measure"] = gr.Button("Build a real cache and compare", variant="secondary")
        w["measured"] = gr.Markdown()
        w["measure_table"] = gr.Dataframe(
            headers=MEASURE_HEADERS, label="Per layer: predicted vs measured", interactive=False
        )
        build_quantized_measure(lm, w)
