"""The view of the lesson "Quantization, token by token" (playground/hood/quantization.py)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterator
from typing import Any, ClassVar

import gradio as gr
import plotly.graph_objects as go

from playground.engine.base import Engine
from playground.engine.kv_quant import KV_FORMATS, RESIDUAL_TOKENS
from playground.engine.quantize import WEIGHT_FORMATS
from playground.engine.tokens import token_texts
from playground.errors import PlaygroundError
from playground.hood import quantization as quantization_lesson
from playground.hood.common import LONG_TEXT
from playground.hood.quantization import LADDER, LESSON, MAX_NEW_TOKENS, QuantizationRun
from playground.plots.hood import quantization as plots
from playground.traces import gallery_trace
from playground.ui.common import Widgets, as_whole, connect
from playground.ui.hood.base import (
    GREEN,
    RED,
    HoodEnv,
    LessonView,
    RunContext,
    TabServices,
    run_row,
    spans,
    status,
    verdict,
)
from playground.ui.i18n import DEFAULT, i18n, localize, localize_recorded, t
from playground.ui.ranges import CheckedSlider

TEXT = LONG_TEXT + (
    "Printers became publishers, booksellers and newsmen, and the shop with its press, its cases of type "
    "and its apprentices became a fixture of every trading town from Venice to London."
)
COLUMNS = [  # the table's headers (keys: the server sets them in the page's language)
    "hood.quant.col.format",
    "hood.quant.col.library",
    "hood.quant.col.bits",
    "hood.quant.col.weights",
    "hood.quant.col.kv",
    "hood.quant.col.mean_kl",
    "hood.quant.col.p99_kl",
    "hood.quant.col.top1",
    "hood.quant.col.flip",
    "hood.quant.col.perplexity",
    "hood.quant.col.tok_s",
    "hood.quant.col.ratio",
]
CHOICES = [  # the formats by name (a weights format's name says what it quantizes: "HQQ 4-bit")
    *((f.label, f.name) for f in WEIGHT_FORMATS.values()),
    *((f.label, f"kv-{f.name}") for f in KV_FORMATS.values()),
]
SHOWN_TAIL = 16  # tokens of each continuation shown after the fork
# The quick setting: three formats (8-bit weights, 4-bit weights, an 8-bit KV cache) over 64 tokens (this
# 61-token text, whose tokens after the first are 60 predictions, then 4 new tokens): 0.06 of the whole
# ladder's time in one process (README, "Quantization": 10-17 s on 2 busy cores, where the ladder takes
# 165-287 s). Meanwhile the whole ladder is shown from the gallery's trace.
QUICK_TEXT = (
    "The history of the printing press begins long before Gutenberg. Carved wooden blocks were inked and "
    "pressed onto paper in China, and movable type made of clay and later metal followed in China and Korea. "
    "In Europe, around 1440, a goldsmith from Mainz combined a screw press,"
)
QUICK = {"quant_text": QUICK_TEXT, "quant_formats": ["int8", "hqq4", "kv-fp8"], "quant_tokens": 4}
LADDER_TRACE = "hood-quant.json"  # the whole ladder, recorded (docs/traces)


class QuantizationView(LessonView):
    key = "quant"
    lesson = LESSON
    label = "hood.quant.label"
    group = "cost"
    run_label = "hood.quant.run"
    action = "hood.quant.action"
    explain = "hood.quant.explain"
    outputs = ("quant_strip", "quant_ladder", "quant_fork", "quant_table", "quant_bytes")
    main = "quant_strip"
    tables: ClassVar[dict[str, list[str]]] = {"quant_table": COLUMNS}
    quick: ClassVar[dict[str, Any]] = QUICK

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        w["quant_text"] = gr.Textbox(
            TEXT,
            label=i18n("hood.quant.text"),  # says MAX_TEXT_TOKENS
            lines=3,
            max_lines=6,
            elem_id="hood-quant-text",
            info=i18n("hood.quant.text.info"),
        )
        with gr.Row():
            w["quant_formats"] = gr.CheckboxGroup(
                CHOICES,
                value=list(LADDER),
                label=i18n("hood.quant.formats"),
                scale=4,
                elem_id="hood-quant-formats",
                info=i18n("hood.quant.formats.info"),  # says RESIDUAL_TOKENS
            )
            w["quant_tokens"] = CheckedSlider(
                1,
                MAX_NEW_TOKENS,
                value=32,
                step=1,
                label=i18n("hood.quant.tokens"),
                scale=1,
                elem_id="hood-quant-tokens",
                info=i18n("hood.quant.tokens.info"),
            )
            w["quant_quick"] = gr.Button(
                i18n("hood.quant.quick"), size="sm", scale=1, elem_id="hood-quant-quick"
            )
        run_row(w, self)
        w["quant_strip"] = gr.Plot(label=i18n("hood.quant.plot.strip"), elem_id="hood-quant-strip")
        w["quant_ladder"] = gr.Plot(
            label=i18n("hood.quant.ladder"), visible=False, elem_id="hood-quant-ladder"
        )
        w["quant_fork"] = gr.HTML(elem_id="hood-quant-fork")
        w["quant_table"] = gr.Dataframe(
            headers=[t(key, DEFAULT) for key in COLUMNS],  # the page's language: HoodTab.hood_texts
            label=i18n("hood.quant.table"),
            interactive=False,
            wrap=True,
            elem_id="hood-quant-table",
        )
        w["quant_bytes"] = gr.Plot(label=i18n("hood.quant.plot.bytes"), elem_id="hood-quant-bytes")

    def run(
        self, ctx: RunContext, quant_text: str, quant_formats: list[str] | None, quant_tokens: float
    ) -> Iterator[dict[str, Any]]:
        """Every chosen format against the loaded model on one text, redrawn after each format."""
        if not (quant_text or "").strip():
            raise PlaygroundError(
                "The text is empty: type a sentence or two.", key="hood.quantization.error.empty"
            )
        if not quant_formats:
            raise PlaygroundError("Choose at least one format.", key="hood.quantization.error.no_formats")
        lm, lang = ctx.engine, ctx.lang
        ids = list(lm.tokenizer(quant_text, add_special_tokens=True).input_ids)
        tokens, run, drawn = as_whole(quant_tokens, t("hood.quant.tokens", lang)), None, -1
        ladder = {"quant_ladder": recorded_ladder(lm, quant_formats, lang)}  # shown while the run measures
        yield ladder
        for run in quantization_lesson.iter_run(lm, ids, quant_formats, tokens, ctx.control):
            if len(run.results) != drawn:
                drawn = len(run.results)
                yield {**status(self, run.phase, False, lang), **self.figures(lm, run, lang)}
            else:
                yield status(self, run.phase, False, lang)
        if run is None:
            return
        if not run.results:
            raise PlaygroundError(
                "No format could run here: {why}",
                key="hood.quant.error.none_ran",
                why=list(run.skipped.values()),
            )
        yield {
            **status(self, run.phase, True, lang),
            **self.figures(lm, run, lang),
            **self.texts(lm, run, lang),
            **ladder,
        }

    def figures(self, lm: Engine, run: QuantizationRun, lang: str = DEFAULT) -> dict[str, Any]:
        """The strip, the table and the bytes plot for the formats measured so far."""
        if not run.reference_ids:
            return {}
        texts = token_texts(lm.tokenizer, run.positions, run.text_ids[:1])
        ticks = [_short(text.visible) for text in texts]
        names = [text.visible + (f" ({text.describe()})" if text.split else "") for text in texts]
        rows = [plots.StripRow(r.label, r.kl, r.top1, r.first_flip) for r in run.results]
        points = []
        for r in run.results:
            kv = r.key.startswith("kv-")  # a KV cache format alone (with weights: on the weights side)
            size = r.kv_bytes if kv else r.weight_bytes
            points.append(plots.Point(r.label, kv, size, r.mean_kl, r.top1_agreement))
        return {
            "quant_strip": plots.kl_strip_figure(rows, ticks, names, len(run.text_ids) - 1, lang),
            "quant_table": table_rows(run, lang),
            "quant_bytes": plots.bytes_quality_figure(
                points, run.reference_weight_bytes, run.reference_kv_bytes, lang
            ),
        }

    def texts(self, lm: Engine, run: QuantizationRun, lang: str = DEFAULT) -> dict[str, Any]:
        return {"quant_summary": summary(run, lang), "quant_fork": forks_html(lm, run, lang)}

    def wire(self, w: Widgets, tab: TabServices) -> None:
        def hood_quant_quick() -> dict[str, Any]:
            """The quick setting on the widgets (nothing runs until Run)."""
            return dict(QUICK)

        connect(w["quant_quick"].click, hood_quant_quick, w, list(QUICK), api_name=None, model=False)


def recorded_ladder(lm: Engine, formats: list[str], lang: str = DEFAULT) -> Any:
    """The gallery's recorded run of the whole ladder (its strip, marked recorded) while a run of
    fewer formats measures them; hidden for the whole ladder, or when that trace is of another model."""
    trace = gallery_trace(LADDER_TRACE)
    if set(LADDER) <= set(formats) or trace is None or trace.model != lm.name:
        return gr.Plot(None, visible=False)
    strip = next((f for f in trace.data["outputs"]["figures"] if f["name"] == "quant_strip"), None)
    if strip is None:
        return gr.Plot(None, visible=False)
    what = trace.title.split(": ", 1)[-1]
    label = t("hood.quant.ladder_recorded", lang, date=trace.created[:10], model=trace.model, what=what)
    return gr.Plot(go.Figure(localize_recorded(strip["figure"], lang)), label=label, visible=True)


def table_rows(run: QuantizationRun, lang: str = DEFAULT) -> list[list[Any]]:
    """The reference's row, then one row per format measured."""
    reference = [
        t("hood.quant.loaded", lang, dtype=run.dtype),
        "transformers",
        _bits(run.dtype),
        round(run.reference_weight_bytes / 1e6, 1),
        round(run.reference_kv_bytes / 1024, 1),
        0.0,
        0.0,
        "100%",
        "–",
        round(run.reference_perplexity, 2),
        _number(run.reference_tok_s),
        "1.00×",
    ]
    rows = [reference]
    for r in run.results:
        ratio = r.tok_s[1] / r.tok_s[0] if r.tok_s[0] > 0 else math.nan
        rows.append(
            [
                r.label,
                r.library,
                round(r.bits, 2),
                round(r.weight_bytes / 1e6, 1),
                round(r.kv_bytes / 1024, 1),
                round(r.mean_kl, 4),
                round(r.p99_kl, 4),
                f"{r.top1_agreement:.0%}",
                "–" if r.first_flip is None else r.first_flip + 1,
                round(r.perplexity, 2),
                _number(r.tok_s[1]),
                "–" if math.isnan(ratio) else f"{ratio:.2f}×",
            ]
        )
    return rows


def summary(run: QuantizationRun, lang: str = DEFAULT) -> str:
    """What the run shows, in a few lines: the reference, weights, KV cache, bytes, speed."""
    weights = [r for r in run.results if not r.key.startswith("kv-")]
    caches = [r for r in run.results if r.key.startswith("kv-")]
    lines = [localize(run.reference_note, lang)]
    if weights:
        lines.append(t("hood.quant.sum.weights", lang, told=_told(weights)))
        broken = [r.label for r in weights if r.top1_agreement < 0.5]
        if broken:
            lines.append(t("hood.quant.sum.broken", lang, formats=", ".join(broken)))
    if caches:
        positions = len(run.text_ids) - 1
        lines.append(
            t("hood.quant.sum.kv", lang, told=_told(caches), positions=positions, residual=RESIDUAL_TOKENS)
        )
        exact = all(r.kv_bytes_match for r in caches)
        said = verdict(exact, "hood.quant.sum.bytes_equal", "hood.quant.sum.bytes_differ", lang)
        lines.append(t("hood.quant.sum.bytes", lang, verdict=said))
    lines.append(_speed_line(run, lang))
    if run.skipped:
        skipped = " ".join(f"{k}: {localize(why, lang)}" for k, why in run.skipped.items())
        lines.append(t("hood.quant.sum.skipped", lang, skipped=skipped))
    return "\n\n".join(lines)


def _told(results: list[Any]) -> str:
    """'HQQ 4-bit 97% (KL 0.012), ...': each format's top-1 agreement and mean KL."""
    return ", ".join(f"{r.label} {r.top1_agreement:.0%} (KL {r.mean_kl:.3g})" for r in results)


def _speed_line(run: QuantizationRun, lang: str) -> str:
    faster = [r.label for r in run.results if r.tok_s[1] > 1.1 * r.tok_s[0]]
    text = t("hood.quant.sum.speed", lang, tok_s=_number(run.reference_tok_s), device=run.device)
    if faster:
        return text + t("hood.quant.sum.faster", lang, formats=", ".join(faster))
    return text + t("hood.quant.sum.not_faster", lang)


def forks_html(lm: Engine, run: QuantizationRun, lang: str = DEFAULT) -> str:
    """Per format: where its greedy continuation leaves the reference's, both continuations from there."""
    text, parts = run.text_ids, []
    for r in run.results:
        name = f"<b>{html.escape(r.label)}</b>"
        if r.first_divergence is None:
            parts.append(f"<p>{t('hood.quant.fork.same', lang, name=name, tokens=len(r.quantized_ids))}</p>")
            continue
        at = r.first_divergence
        common = r.reference_ids[:at]
        before = text + common
        model = spans(lm.tokenizer, r.reference_ids[at : at + SHOWN_TAIL], GREEN, context=before)
        quantized = spans(lm.tokenizer, r.quantized_ids[at : at + SHOWN_TAIL], RED, context=before)
        parts_at = t("hood.quant.fork.parts", lang, name=name, at=at + 1)
        parts.append(
            f"<p>{parts_at} …{spans(lm.tokenizer, common[-8:], context=text)}"
            f"<br>&nbsp;&nbsp;{t('hood.quant.fork.model', lang)} {model}"
            f"<br>&nbsp;&nbsp;{html.escape(r.label)}: {quantized}</p>"
        )
    return "".join(parts)


def _short(text: str, width: int = 7) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _bits(dtype: str) -> int:
    return 32 if dtype == "float32" else 16


def _number(value: float) -> float | str:
    return "–" if math.isnan(value) else round(value, 1)


VIEW = QuantizationView()
