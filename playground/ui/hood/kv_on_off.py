"""The view of the lesson "KV cache on vs off" (playground/hood/kv_on_off.py)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any, ClassVar

import gradio as gr

from playground.engine.base import Engine
from playground.hood import kv_on_off as kv_on_off_lesson
from playground.hood.common import preset_ids, whole_in_range
from playground.hood.kv_on_off import LESSON, KVOnOff
from playground.messages import Message
from playground.plots.hood import kv_on_off as plots
from playground.ui.common import as_whole
from playground.ui.hood.base import BLUE, HoodEnv, LessonView, RunContext, run_row, spans, status, verdict
from playground.ui.i18n import DEFAULT, i18n, localize, t
from playground.ui.ranges import CheckedSlider


class KVOnOffView(LessonView):
    key = "kv"
    lesson = LESSON
    label = "hood.kv.label"
    group = "cost"
    run_label = "hood.kv.run"
    action = "hood.kv.action"
    explain = "hood.kv.explain"
    outputs = ("kv_latency", "kv_cumulative", "kv_bytes", "kv_text")
    main = "kv_latency"
    quick: ClassVar[dict[str, Any]] = {"kv_length": 48, "kv_tokens": 3}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["kv_length"] = CheckedSlider(
                16,
                2000,
                value=400,
                step=1,
                label=i18n("hood.kv.length"),
                info=i18n("hood.kv.length.info"),
                elem_id="hood-kv-length",
            )
            w["kv_tokens"] = CheckedSlider(
                2,
                64,
                value=12,
                step=1,
                label=i18n("hood.kv.tokens"),
                info=i18n("hood.kv.tokens.info"),
                elem_id="hood-kv-tokens",
            )
        run_row(w, self)
        w["kv_latency"] = gr.Plot(label=i18n("hood.kv.plot.latency"), elem_id="hood-kv-latency")
        with gr.Row():
            w["kv_cumulative"] = gr.Plot(label=i18n("hood.kv.plot.cumulative"), elem_id="hood-kv-cumulative")
            w["kv_bytes"] = gr.Plot(label=i18n("hood.kv.plot.bytes"), elem_id="hood-kv-bytes")
        w["kv_text"] = gr.HTML(elem_id="hood-kv-text")

    def run(self, ctx: RunContext, kv_length: float, kv_tokens: float) -> Iterator[dict[str, Any]]:
        """KV cache on vs off: the same greedy continuation both ways, redrawn after every token."""
        lang = ctx.lang
        length = as_whole(kv_length, t("hood.kv.length", lang))
        length = whole_in_range(length, 16, 4000, Message("hood.name.prompt_length", "Prompt length"))
        ids = preset_ids(ctx.engine.tokenizer, length)
        result = None
        for result in kv_on_off_lesson.iter_run(
            ctx.engine, ids, as_whole(kv_tokens, t("hood.kv.tokens", lang)), ctx.control
        ):
            yield self.views(ctx.engine, result, final=False, lang=lang)
        if result is not None:
            yield self.views(ctx.engine, result, final=True, lang=lang)

    def views(self, lm: Engine, result: KVOnOff, final: bool, lang: str = DEFAULT) -> dict[str, Any]:
        """Figures (redrawn every step) and, at the end, the summary and both continuations."""
        phase = t("hood.kv.phase", lang, phase=localize(result.phase, lang), tokens=result.prompt_tokens)
        views: dict[str, Any] = {
            **status(self, phase, final, lang),
            "kv_latency": plots.step_latency_figure(
                result.cached_prefill_seconds,
                result.recomputed_prefill_seconds,
                result.cached_step_seconds,
                result.recomputed_step_seconds,
                lang,
            ),
            "kv_cumulative": plots.cumulative_figure(result.cumulative(True), result.cumulative(False), lang),
            "kv_bytes": plots.cache_bytes_figure(
                result.cache_lengths, result.cache_bytes, result.formula_bytes, lang
            ),
        }
        if final:
            views["kv_summary"] = summary(result, lang)
            same = t("hood.kv.text.identical" if result.identical else "hood.kv.text.different", lang)
            cached, recomputed = (
                spans(lm.tokenizer, ids, BLUE) for ids in (result.cached_ids, result.recomputed_ids)
            )
            views["kv_text"] = (
                f"<p>{t('hood.kv.text.cached', lang)} {cached}</p>"
                f"<p>{t('hood.kv.text.recomputed', lang)} {recomputed}</p>"
                f"<p>{t('hood.kv.text.tokens', lang, same=same)}</p>"
            )
        return views


def summary(result: KVOnOff, lang: str = DEFAULT) -> str:
    per_token = result.formula_bytes[0] // max(result.cache_lengths[0], 1)
    same = verdict(result.identical, "hood.kv.sum.identical", "hood.kv.sum.different", lang)
    cached_ms, recomputed_ms = result.cached_prefill_seconds * 1000, result.recomputed_prefill_seconds * 1000
    lines = [
        t("hood.kv.sum.tokens", lang, verdict=same, tokens=len(result.cached_ids)),
        t("hood.kv.sum.prefill", lang, cached=cached_ms, recomputed=recomputed_ms),
    ]
    if result.cached_step_seconds:
        cached = statistics.median(result.cached_step_seconds) * 1000
        recomputed = statistics.median(result.recomputed_step_seconds) * 1000
        lines.append(
            t("hood.kv.sum.step", lang, cached=cached, recomputed=recomputed, ratio=result.step_ratio)
        )
    formula = t("hood.kv.sum.formula" if result.bytes_match else "hood.kv.sum.not_formula", lang)
    lines.append(
        t(
            "hood.kv.sum.bytes",
            lang,
            per_token=per_token,
            dtype=result.dtype,
            formula=formula,
            bytes=result.cache_bytes[-1],
            tokens=result.cache_lengths[-1],
        )
    )
    return "\n\n".join(lines)


VIEW = KVOnOffView()
