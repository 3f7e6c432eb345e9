"""The KV tab's "Measured" row for quantized caches: build a real transformers QuantizedCache (fp8,
int8, int4, int2) with the loaded model and put its bytes next to the calculator's at that dtype."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from playground import kv as kvm
from playground.engine.base import Engine
from playground.engine.kv_quant import KV_FORMATS, RESIDUAL_TOKENS
from playground.errors import PlaygroundError
from playground.ui.common import as_whole, connect
from playground.ui.i18n import i18n, localize, session_lang, t

QUANT_TABLE_HEADERS = ["kv.col.layer", "kv.col.predicted", "kv.col.measured", "kv.col.equal"]


def build_quantized_measure(lm: Engine, w: dict[str, Any]) -> None:
    """Its widgets, under the plain measurement (inside the KV tab's "Measured" accordion)."""
    with gr.Row():
        w["measure_kv_dtype"] = gr.Dropdown(
            list(KV_FORMATS),
            value="int4",
            label=i18n("kv.quant.dtype"),
            scale=1,
            info=i18n("kv.quant.dtype.info"),
        )
        w["measure_quant"] = gr.Button(
            i18n("kv.quant.run"), variant="secondary", scale=1, elem_id="kv-measure-quant"
        )
    w["measured_quant"] = gr.Markdown()
    w["measure_quant_table"] = gr.Dataframe(
        headers=[t(key, "en") for key in QUANT_TABLE_HEADERS], label=i18n("kv.quant.table"), interactive=False
    )


def measure_quantized(lm: Engine, dtype: str, prompt_len: float, lang: str = "en") -> dict[str, Any]:
    """Handler: a real quantized cache over prompt_len synthetic tokens, its bytes vs the formula."""
    if not lm.capabilities.cache_bytes or lm.probes is None:
        raise PlaygroundError(
            "The {kind} engine keeps its cache on the server: nothing to build here.",
            key="kv.quant.on_server",
            kind=lm.kind,
        )
    n = as_whole(prompt_len, t("kv.field.prompt_length", lang))
    if not 1 <= n <= lm.context_length:
        raise PlaygroundError(
            "Prompt length must be 1 to {most:,} tokens, got {n:,}.",
            key="kv.quant.length",
            most=lm.context_length,
            n=n,
        )
    m = kvm.measure_quantized_vs_predicted(lm, dtype, n)
    rows = [
        [i, p, measured, p == measured]
        for i, (p, measured) in enumerate(zip(m.predicted_layers, m.measured_layers, strict=True))
    ]
    plain = kvm.kv_cache_bytes(lm.config, n, 1, m.model_dtype, "transformers")
    text = quantized_text(m, plain, lang)
    return {"measured_quant": text, "measure_quant_table": rows}


def quantized_text(m: kvm.QuantizedMeasurement, plain: int, lang: str = "en") -> str:
    """A quantized cache's bytes next to the formula's, and next to the same tokens unquantized (plain)."""
    residual = ""
    if m.residual_tokens:
        residual = t("kv.quant.residual", lang, tokens=m.residual_tokens, dtype=m.model_dtype)
    return t(
        "kv.quant.measured",
        lang,
        dtype=m.dtype,
        measured=m.measured_bytes,
        predicted=m.predicted_bytes,
        verdict=t("kv.equal" if m.equal else "kv.differ", lang),
        quantized=m.quantized_tokens,
        residual=residual,
        model_dtype=m.model_dtype,
        plain=plain,
        ratio=plain / max(m.measured_bytes, 1),
        call=f"kv_cache_bytes(config, {m.quantized_tokens}, 1, {m.dtype!r}, 'transformers', "
        f"scale_dtype={m.model_dtype!r})",
        label=KV_FORMATS[m.dtype].label,
        note=localize(kvm.KV_DTYPES[m.dtype].note, lang),
        window=RESIDUAL_TOKENS,
    )


def wire_quantized_measure(engine_of: Callable[[Any], Engine], w: dict[str, Any]) -> None:
    """Its button: one model event (API /kv_measure_quant) on the tab's model (engine_of(request));
    a problem shows in its own Markdown."""

    def kv_measure_quant(
        measure_kv_dtype: str, measure_length: float, request: gr.Request = None
    ) -> dict[str, Any]:
        lm = engine_of(request)
        return measure_quantized(lm, measure_kv_dtype, measure_length, session_lang(request))

    connect(
        w["measure_quant"].click,
        kv_measure_quant,
        w,
        ["measured_quant", "measure_quant_table"],
        api_name="kv_measure_quant",
        status="measured_quant",
    )
