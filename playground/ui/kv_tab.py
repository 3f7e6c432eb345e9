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
from playground.ui.links import Link, link_opener

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


def preset_choices(lm: Engine | None = None) -> list[str]:
    """The presets, after the loaded model when its config is known here (a served one may not be)."""
    return [LOADED, *PRESETS] if lm is None or loaded_config(lm) else list(PRESETS)


def default_preset(lm: Engine) -> str:
    return preset_choices(lm)[0]


def loaded_config(lm: Engine) -> dict[str, Any]:
    """The loaded model's full config as a plain config.json dict ({} when a serving engine's model
    config is not available here)."""
    return json.loads(lm.config.to_json_string(use_diff=False)) if lm.config is not None else {}


def model_dtype_name(lm: Engine) -> str:
    """The loaded model's dtype as the calculator names it: torch.float32 -> "float32" (a serving
    engine's weights format is not known here: bfloat16, how most checkpoints are published)."""
    return str(lm.dtype).removeprefix("torch.") if lm.dtype is not None else "bfloat16"


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


def summary_markdown(b: kvm.KVBreakdown, params: int, source: str, wdtype: str, fit: kvm.FitResult) -> str:
    """Totals in GiB and GB, weights, and the solver's answer with its overhead stated."""
    g, per_token = fit.gpu_bytes, b.total_bytes / (b.seq_len * b.batch_size)
    verdict = "✅ fits" if fit.fits else "❌ does not fit"
    batch_text = "unbounded" if fit.max_batch is None else f"{fit.max_batch:,}"
    size = f"{g / kvm.GB:,.2f}".rstrip("0").rstrip(".")  # 80, 12.5: as typed
    lines = [
        f"### KV cache: **{b.total_bytes:,} bytes** = **{b.gib:,.3f} GiB** (2^30 B) "
        f"= **{b.gb:,.3f} GB** (10^9 B)",
        f"{b.seq_len:,} tokens × batch {b.batch_size} · KV dtype {b.dtype.name} ({b.dtype.note}) · "
        f"mode *{b.geometry.mode}* · per token and sequence: {per_token:,.0f} B",
        f"**Weights:** {params / 1e9:,.3f} B parameters ({source}) in {wdtype} "
        f"= {kvm.format_bytes(fit.weights_bytes)}",
        f"**On {article(g / kvm.GB)} {size} GB GPU** ({g / kvm.GIB:,.1f} GiB): {verdict}. "
        "Overhead reserve "
        f"{kvm.format_bytes(fit.overhead_bytes)} ({fit.overhead_bytes / g:.0%} of the GPU, for activations, "
        f"CUDA context, fragmentation) leaves {kvm.format_bytes(max(fit.free_for_kv, 0))} for the KV cache.",
        f"- longest context at batch {b.batch_size}: {_max_len_text(fit)}",
        f"- largest batch at {b.seq_len:,} tokens: **{batch_text}**",
    ]
    if fit.context_limit is not None and b.seq_len > fit.context_limit:
        limit = f"{fit.context_limit:,} (`max_position_embeddings`)"
        lines.append(f"- ⚠️ {b.seq_len:,} tokens is past this model's own context limit of {limit}.")
    if fit.free_for_kv < 0:
        lines.append("- ⚠️ the weights and the reserve alone exceed the GPU's memory.")
    return "\n\n".join(lines[:4]) + "\n\n" + "\n".join(lines[4:])


def article(number: float) -> str:
    """'an' before a number read with a vowel sound (8, 11, 18, 80-89, 800...), else 'a'."""
    digits = f"{number:.0f}"
    eleven_or_eighteen = len(digits) % 3 == 2 and digits[:2] in ("11", "18")  # 11, 18 000, 11 000 000...
    return "an" if digits.startswith("8") or eleven_or_eighteen else "a"


def _max_len_text(fit: kvm.FitResult) -> str:
    """Memory's answer, capped at the model's own context limit (and saying so)."""
    if fit.max_seq_len is None:
        memory = "any length (every cached layer is windowed, so the cache stops growing)"
    elif fit.max_seq_len >= kvm.MAX_TOKENS:
        memory = f"more than {kvm.MAX_TOKENS:,} tokens"
    else:
        memory = f"{fit.max_seq_len:,} tokens"
    limit = fit.context_limit
    if limit is None or (fit.max_seq_len is not None and fit.max_seq_len <= limit):
        return f"**{memory}**"
    return f"**{limit:,} tokens**, the model's own limit (`max_position_embeddings`; memory alone: {memory})"


def formula_markdown(b: kvm.KVBreakdown) -> str:
    """The formula with numbers substituted, then which config key each number came from."""
    parts = ["#### Formula", *[f"- `{line}`" for line in kvm.formula_lines(b)]]
    parts.append(f"- **total = {b.total_bytes:,} bytes**")
    parts += [
        "#### Where the numbers come from",
        *[f"- {q} = **{v}** ← `{s}`" for q, v, s in b.geometry.sources],
    ]
    parts += [f"> {note}" for note in b.geometry.notes]
    return "\n".join(parts)


def layer_rows(b: kvm.KVBreakdown) -> list[list[Any]]:
    """One row per layer; token counts and bytes with thousands separators."""
    return [
        [x.index, x.kind, x.kv_heads, x.k_dim, x.v_dim, f"{x.tokens:,}", f"{x.bytes:,}"] for x in b.layers
    ]


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
    """The calculator as a handler: a user error (bad JSON, bad size) replaces every output, so no
    numbers from an earlier config stay on screen, and shows as a toast too."""

    @functools.wraps(calc)
    def kv_calculate(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return calc(*args, **kwargs)
        except PlaygroundError as exc:
            gr.Warning(str(exc))
            cleared = (f"**Can't calculate:** {exc}", "", [], None, None)
            return dict(zip(CALCULATOR_OUTPUTS, cleared, strict=True))

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
    verdict = "✅ equal to the byte" if m.equal else "❌ they differ"
    text = (
        f"### Measured {m.measured_bytes:,} bytes · predicted {m.predicted.total_bytes:,} bytes: "
        f"{verdict}\n\n"
        f"A forward pass of {lm.name} (loaded in {model_dtype_name(lm)}) over {n:,} synthetic tokens "
        f"(batch 1) filled the engine's KV cache, whose keys and values are {m.dtype}, the model's own "
        "dtype; "
        f"measured = Σ numel × element_size over them ({len(m.measured_layers)} layers). "
        f"Predicted = `kv_cache_bytes(config, {n}, 1, {m.dtype!r}, 'transformers')` = "
        f"{kvm.format_bytes(m.predicted.total_bytes)}, in that same dtype: the KV dtype chosen above "
        "does not apply to this real cache."
    )
    return text, rows


def server_kv_text(lm: Engine) -> str:
    """A serving engine's own KV capacity and usage, next to the calculator's bytes for that many
    tokens of the served config (wording to be settled by the UI rework)."""
    figures = lm.kv_figures()
    if figures is None:
        return f"**{lm.capabilities.why_not('cache_bytes')}**, and {lm.kind} does not report KV figures here."
    config = lm.config
    used = "usage not reported"
    if figures.used_tokens is not None:
        used = f"{figures.used_tokens:,} tokens in use"
    if figures.usage is not None:
        used += f" ({figures.usage:.1%})"
    text = f"### {lm.kind}'s own KV cache: {figures.capacity_tokens:,} tokens · {used}\n\n"
    text += f"From {figures.source}"
    if figures.block_size and figures.num_blocks:
        text += f": {figures.num_blocks:,} blocks × {figures.block_size} tokens"
    if config is None:
        return text + ". The served model's config is not available here, so there is no prediction."
    c = kvm.compare_server_kv(figures, config)
    reported = ""
    if c.reported_bytes:
        reported = f"; the engine reports {kvm.format_bytes(c.reported_bytes)} per GPU"
    return text + (
        f".\n\nPredicted by the calculator for the served config ({c.dtype_note}): {c.bytes_per_token:,} B "
        f"per token, so {c.capacity_tokens:,} tokens take **{kvm.format_bytes(c.predicted_bytes)}**"
        f"{reported}."
    )


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
        with gr.Column(scale=2):
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
    w["seq_len"] = gr.Number(
        4096,
        label="Sequence length (tokens)",
        precision=0,
        minimum=1,
        info="Prompt + generated tokens: every cached layer holds one K and one V per token.",
    )
    w["batch"] = gr.Number(
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
    w["overhead_pct"] = gr.Slider(
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
            w["measure_length"] = gr.Slider(
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
