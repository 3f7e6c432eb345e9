"""The KV tab's "Measured" row for quantized caches: build a real transformers QuantizedCache (fp8,
int8, int4, int2) with the loaded model and put its bytes next to the calculator's at that dtype."""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground import kv as kvm
from playground.engine.base import Engine
from playground.engine.kv_quant import KV_FORMATS, RESIDUAL_TOKENS
from playground.errors import PlaygroundError
from playground.ui.common import as_whole, connect

HEADERS = ["layer", "predicted bytes", "measured bytes", "equal"]


def build_quantized_measure(lm: Engine, w: dict[str, Any]) -> None:
    """Its widgets, under the plain measurement (inside the KV tab's "Measured" accordion)."""
    with gr.Row():
        w["measure_kv_dtype"] = gr.Dropdown(
            list(KV_FORMATS),
            value="int4",
            label="Quantized KV dtype",
            scale=1,
            info="transformers QuantizedCache: fp8 built in, int8 via HQQ, int4/int2 via optimum-quanto",
        )
        w["measure_quant"] = gr.Button("Build a quantized cache and compare", variant="secondary", scale=1)
    w["measured_quant"] = gr.Markdown()
    w["measure_quant_table"] = gr.Dataframe(
        headers=HEADERS, label="Per layer: quantized cache, predicted vs measured", interactive=False
    )


def measure_quantized(lm: Engine, dtype: str, prompt_len: float) -> dict[str, Any]:
    """Handler: a real quantized cache over prompt_len synthetic tokens, its bytes vs the formula."""
    if not lm.capabilities.cache_bytes or lm.probes is None:
        raise PlaygroundError(f"The {lm.kind} engine keeps its cache on the server: nothing to build here.")
    n = as_whole(prompt_len, "Prompt length")
    if not 1 <= n <= lm.context_length:
        raise PlaygroundError(f"Prompt length must be 1 to {lm.context_length:,} tokens, got {n:,}.")
    m = kvm.measure_quantized_vs_predicted(lm, dtype, n)
    rows = [
        [i, p, measured, p == measured]
        for i, (p, measured) in enumerate(zip(m.predicted_layers, m.measured_layers, strict=True))
    ]
    plain = kvm.kv_cache_bytes(lm.config, n, 1, m.model_dtype, "transformers")
    verdict = "✅ equal to the byte" if m.equal else "❌ they differ"
    residual = f" + {m.residual_tokens} in the residual window ({m.model_dtype})" if m.residual_tokens else ""
    text = (
        f"### {m.dtype} cache: measured {m.measured_bytes:,} bytes · predicted {m.predicted_bytes:,} bytes: "
        f"{verdict}\n\n"
        f"{m.quantized_tokens:,} tokens held quantized{residual}; the same tokens in {m.model_dtype} take "
        f"{plain:,} bytes ({plain / max(m.measured_bytes, 1):.2f}× more). Predicted = "
        f"`kv_cache_bytes(config, {m.quantized_tokens}, 1, {m.dtype!r}, 'transformers', "
        f"scale_dtype={m.model_dtype!r})`: {KV_FORMATS[m.dtype].label}, {kvm.KV_DTYPES[m.dtype].note}; "
        f"scales and zeros are stored in the model's dtype. Decoding appends to a residual window of "
        f"{RESIDUAL_TOKENS} unquantized tokens, re-quantized into the rest when it fills."
    )
    return {"measured_quant": text, "measure_quant_table": rows}


def wire_quantized_measure(lm: Engine, w: dict[str, Any]) -> None:
    """Its button: one model event (API /kv_measure_quant); a problem shows in its own Markdown."""

    def kv_measure_quant(measure_kv_dtype: str, measure_length: float) -> dict[str, Any]:
        return measure_quantized(lm, measure_kv_dtype, measure_length)

    connect(
        w["measure_quant"].click,
        kv_measure_quant,
        w,
        ["measured_quant", "measure_quant_table"],
        api_name="kv_measure_quant",
        status="measured_quant",
    )
