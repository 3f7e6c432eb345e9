"""The view of the lesson "Prefill vs decode" (playground/hood/prefill_decode.py)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any, ClassVar

import gradio as gr

from playground.hood import prefill_decode as prefill_decode_lesson
from playground.hood.prefill_decode import LESSON, CostPoint, PrefillDecode
from playground.plots.hood import prefill_decode as plots
from playground.ui.common import as_whole
from playground.ui.hood.base import HoodEnv, LessonView, RunContext, run_row, status
from playground.ui.i18n import DEFAULT, i18n, t
from playground.ui.ranges import CheckedSlider

LENGTHS = [16, 64, 256, 1024, 2048, 4096]
COLUMNS = [  # the table's headers (keys: the server sets them in the page's language)
    "hood.pd.col.tokens",
    "hood.pd.col.prefill_ms",
    "hood.pd.col.prefill_tok_s",
    "hood.pd.col.decode_ms",
    "hood.pd.col.decode_tok_s",
    "hood.pd.col.prefill_intensity",
    "hood.pd.col.decode_intensity",
    "hood.pd.col.bandwidth",
]


class PrefillDecodeView(LessonView):
    key = "pd"
    lesson = LESSON
    label = "hood.pd.label"
    group = "cost"
    run_label = "hood.pd.run"
    action = "hood.pd.action"
    explain = "hood.pd.explain"
    outputs = ("pd_throughput", "pd_intensity", "pd_table")
    main = "pd_throughput"
    tables: ClassVar[dict[str, list[str]]] = {"pd_table": COLUMNS}
    quick: ClassVar[dict[str, Any]] = {"pd_lengths": [16, 64], "pd_decode": 2}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["pd_lengths"] = gr.CheckboxGroup(
                LENGTHS,
                value=[16, 64, 256, 1024, 4096],
                label=i18n("hood.pd.lengths"),
                info=i18n("hood.pd.lengths.info"),
                elem_id="hood-pd-lengths",
            )
            w["pd_decode"] = CheckedSlider(
                2,
                32,
                value=6,
                step=1,
                label=i18n("hood.pd.decode"),
                info=i18n("hood.pd.decode.info"),
                elem_id="hood-pd-decode",
            )
        run_row(w, self)
        with gr.Row():
            w["pd_throughput"] = gr.Plot(label=i18n("hood.pd.plot.throughput"), elem_id="hood-pd-throughput")
            w["pd_intensity"] = gr.Plot(label=i18n("hood.pd.plot.intensity"))
        headers = [t(key, DEFAULT) for key in COLUMNS]  # the page's language: HoodTab.hood_texts
        w["pd_table"] = gr.Dataframe(headers=headers, label=i18n("hood.pd.table"), interactive=False)

    def run(self, ctx: RunContext, pd_lengths: list[Any], pd_decode: float) -> Iterator[dict[str, Any]]:
        """Prefill vs decode tokens/s at each chosen prompt length, with the estimated intensity."""
        lang = ctx.lang
        lengths = [as_whole(n, t("hood.pd.length", lang)) for n in pd_lengths or []]
        decode, result = as_whole(pd_decode, t("hood.pd.decode", lang)), None
        for result in prefill_decode_lesson.iter_run(ctx.engine, lengths, decode, ctx.control):
            yield self.views(result, final=False, lang=lang)
        if result is not None:
            yield self.views(result, final=True, lang=lang)

    def views(self, result: PrefillDecode, final: bool, lang: str = DEFAULT) -> dict[str, Any]:
        points = result.points
        lengths = [p.length for p in points]
        views: dict[str, Any] = {
            **status(self, result.phase, final, lang),
            "pd_throughput": plots.throughput_figure(
                lengths,
                [p.prefill_tokens_per_second for p in points],
                [p.decode_tokens_per_second for p in points],
                lang,
            ),
            "pd_intensity": plots.intensity_figure(
                lengths, [p.prefill.intensity for p in points], [p.decode.intensity for p in points], lang
            ),
            "pd_table": [row(p) for p in points],
        }
        if final and points:
            views["pd_summary"] = summary(result, lang)
        return views


def bandwidth(p: CostPoint) -> float:
    """Estimated GB/s a decode step moved: its bytes (weights + KV cache) over its time."""
    return p.decode.bytes / p.decode_seconds / 1e9


def row(p: CostPoint) -> list[Any]:
    return [
        p.length,
        round(p.prefill_seconds * 1000, 1),
        round(p.prefill_tokens_per_second, 1),
        round(p.decode_seconds * 1000, 1),
        round(p.decode_tokens_per_second, 2),
        round(p.prefill.intensity, 1),
        round(p.decode.intensity, 2),
        round(bandwidth(p), 1),
    ]


def summary(result: PrefillDecode, lang: str = DEFAULT) -> str:
    """The figures over every measured length: the best prefill, the median decode and its range."""
    points = result.points
    best = max(points, key=lambda p: p.prefill_tokens_per_second)
    decode = [p.decode_tokens_per_second for p in points]
    low, high = min(decode), max(decode)
    spread = t("hood.pd.sum.spread", lang, low=low, high=high) if len(points) > 1 else ""
    return t(
        "hood.pd.summary",
        lang,
        prefill=best.prefill_tokens_per_second,
        length=best.length,
        decode=statistics.median(decode),
        spread=spread,
        device=result.device,
        weights=result.shape.weight_bytes / 1e6,
        intensity=statistics.median(p.decode.intensity for p in points),
        bandwidth=statistics.median(bandwidth(p) for p in points),
        prefill_intensity=best.prefill.intensity,
        chunk=result.chunk,
    )


VIEW = PrefillDecodeView()
