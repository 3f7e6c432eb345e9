"""The view of the lesson "Batching" (playground/hood/batching.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import gradio as gr

from playground.engine.base import Engine
from playground.engine.prompts import encode_prompt
from playground.engine.tokens import decode_ids
from playground.errors import PlaygroundError
from playground.hood import batching as batching_lesson
from playground.hood.batching import LESSON, MAX_BATCH, PRESET_QUESTIONS, BatchingResult
from playground.plots.hood import batching as plots
from playground.ui.common import as_whole
from playground.ui.hood.base import HoodEnv, LessonView, RunContext, run_row, status, verdict
from playground.ui.i18n import DEFAULT, i18n, t
from playground.ui.ranges import CheckedSlider

PROMPTS = "\n".join(PRESET_QUESTIONS)
COLUMNS = [  # the table's headers (keys: the server sets them in the page's language)
    "hood.batch.col.number",
    "hood.batch.col.prompt",
    "hood.batch.col.answer",
    "hood.batch.col.equal",
    "hood.batch.col.solo",
    "hood.batch.col.batch",
]


class BatchingView(LessonView):
    key = "batch"
    lesson = LESSON
    label = "hood.batch.label"
    group = "serving"
    run_label = "hood.batch.run"
    action = "hood.batch.action"
    explain = "hood.batch.explain"
    outputs = ("batch_throughput", "batch_latency", "batch_table")
    main = "batch_throughput"
    tables: ClassVar[dict[str, list[str]]] = {"batch_table": COLUMNS}
    quick: ClassVar[dict[str, Any]] = {"batch_n": 2, "batch_tokens": 4}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["batch_n"] = CheckedSlider(
                1, MAX_BATCH, value=8, step=1, label=i18n("hood.batch.n"), elem_id="hood-batch-n"
            )
            w["batch_tokens"] = CheckedSlider(
                4, 128, value=16, step=1, label=i18n("hood.batch.tokens"), elem_id="hood-batch-tokens"
            )
            w["batch_chat"] = gr.Checkbox(
                True,
                label=i18n("hood.batch.chat"),
                info=i18n("hood.batch.chat.info"),
                elem_classes=["stage-hide"],
            )
        w["batch_prompts"] = gr.Textbox(PROMPTS, label=i18n("hood.batch.prompts"), lines=4, max_lines=8)
        run_row(w, self)
        with gr.Row():
            w["batch_throughput"] = gr.Plot(
                label=i18n("hood.batch.plot.throughput"), elem_id="hood-batch-throughput"
            )
            w["batch_latency"] = gr.Plot(label=i18n("hood.batch.plot.latency"))
        w["batch_table"] = gr.Dataframe(
            headers=[t(key, DEFAULT) for key in COLUMNS],  # the page's language: HoodTab.hood_texts
            label=i18n("hood.batch.table"),
            interactive=False,
            wrap=True,
            max_height=360,
        )

    def run(
        self, ctx: RunContext, batch_prompts: str, batch_n: float, batch_tokens: float, batch_chat: bool
    ) -> Iterator[dict[str, Any]]:
        """The first N prompts one by one, then together in one padded batch."""
        lang = ctx.lang
        n = as_whole(batch_n, t("hood.batch.n", lang))
        lines = [line.strip() for line in (batch_prompts or "").splitlines() if line.strip()]
        if len(lines) < n:
            raise PlaygroundError(
                "{n} prompts asked for but only {given} given: one prompt per line.",
                key="hood.batch.error.prompts",
                n=n,
                given=len(lines),
            )
        prompts = [encode_prompt(ctx.engine.tokenizer, line, bool(batch_chat)) for line in lines[:n]]
        tokens, result = as_whole(batch_tokens, t("hood.batch.tokens", lang)), None
        for result in batching_lesson.iter_run(ctx.engine, prompts, tokens, control=ctx.control):
            yield status(self, result.phase, False, lang)
        if result is not None:
            yield self.views(ctx.engine, result, lines[:n], lang)

    def views(
        self, lm: Engine, result: BatchingResult, labels: list[str], lang: str = DEFAULT
    ) -> dict[str, Any]:
        rows = zip(
            labels, result.batch_ids, result.same, result.solo_finished, result.batch_finished, strict=True
        )
        same = verdict(result.identical, "hood.batch.sum.equal", "hood.batch.sum.differ", lang)
        return {
            **status(self, result.phase, True, lang),
            "batch_throughput": plots.batch_throughput_figure(
                result.solo_tokens_per_second, result.batch_tokens_per_second, result.size, lang
            ),
            "batch_latency": plots.batch_latency_figure(result.solo_finished, result.batch_finished, lang),
            "batch_table": [
                [
                    i + 1,
                    label,
                    decode_ids(lm.tokenizer, ids),
                    "✓" if ok else "✗",
                    round(solo, 2),
                    round(done, 2),
                ]
                for i, (label, ids, ok, solo, done) in enumerate(rows)
            ],
            "batch_summary": t(
                "hood.batch.summary",
                lang,
                size=result.size,
                tokens=result.new_tokens,
                solo=result.solo_tokens_per_second,
                batch=result.batch_tokens_per_second,
                ratio=result.throughput_ratio,
                solo_done=result.solo_finished[-1],
                batch_done=max(result.batch_finished),
                same=same,
            ),
        }


VIEW = BatchingView()
