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
from playground.ui.ranges import CheckedSlider

PROMPTS = "\n".join(PRESET_QUESTIONS)
COLUMNS = ["#", "prompt", "answer (batch)", "equal to solo", "solo done at (s)", "batch done at (s)"]


class BatchingView(LessonView):
    key = "batch"
    lesson = LESSON
    label = "Batching"
    group = "serving"
    run_label = "Run: one by one vs one batch"
    explain = (
        "Decoding is memory-bound, so one forward can serve many sequences for nearly the price of one: the "
        "same weight reads produce N tokens. Servers go further with **continuous batching**: a finished "
        "sequence leaves the batch at the next step and a waiting request takes its place, so no slot idles."
    )
    outputs = ("batch_throughput", "batch_latency", "batch_table")
    main = "batch_throughput"
    tables: ClassVar[dict[str, list[str]]] = {"batch_table": COLUMNS}
    quick: ClassVar[dict[str, Any]] = {"batch_n": 2, "batch_tokens": 4}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["batch_n"] = CheckedSlider(
                1, MAX_BATCH, value=8, step=1, label="prompts (N)", elem_id="hood-batch-n"
            )
            w["batch_tokens"] = CheckedSlider(
                4, 128, value=16, step=1, label="new tokens each", elem_id="hood-batch-tokens"
            )
            w["batch_chat"] = gr.Checkbox(
                True, label="chat", info="Wrap each prompt as a user turn", elem_classes=["stage-hide"]
            )
        w["batch_prompts"] = gr.Textbox(
            PROMPTS, label="prompts, one per line (the first N are used)", lines=4, max_lines=8
        )
        run_row(w, self)
        with gr.Row():
            w["batch_throughput"] = gr.Plot(label="throughput", elem_id="hood-batch-throughput")
            w["batch_latency"] = gr.Plot(label="when each sequence was done")
        w["batch_table"] = gr.Dataframe(
            headers=COLUMNS, label="sequences", interactive=False, wrap=True, max_height=360
        )

    def run(
        self, ctx: RunContext, batch_prompts: str, batch_n: float, batch_tokens: float, batch_chat: bool
    ) -> Iterator[dict[str, Any]]:
        """The first N prompts one by one, then together in one padded batch."""
        n = as_whole(batch_n, "number of prompts")
        lines = [line.strip() for line in (batch_prompts or "").splitlines() if line.strip()]
        if len(lines) < n:
            raise PlaygroundError(f"{n} prompts asked for but only {len(lines)} given: one prompt per line.")
        prompts = [encode_prompt(ctx.engine.tokenizer, line, bool(batch_chat)) for line in lines[:n]]
        tokens, result = as_whole(batch_tokens, "new tokens"), None
        for result in batching_lesson.iter_run(ctx.engine, prompts, tokens, control=ctx.control):
            yield status(self, result.phase, final=False)
        if result is not None:
            yield self.views(ctx.engine, result, lines[:n])

    def views(self, lm: Engine, result: BatchingResult, labels: list[str]) -> dict[str, Any]:
        rows = zip(
            labels, result.batch_ids, result.same, result.solo_finished, result.batch_finished, strict=True
        )
        same = verdict(
            result.identical, "Every sequence's tokens equal its solo run", "Some sequences differ"
        )
        return {
            **status(self, result.phase, final=True),
            "batch_throughput": plots.batch_throughput_figure(
                result.solo_tokens_per_second, result.batch_tokens_per_second, result.size
            ),
            "batch_latency": plots.batch_latency_figure(result.solo_finished, result.batch_finished),
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
            "batch_summary": (
                f"{result.size} sequences, up to {result.new_tokens} tokens each: one by one "
                f"**{result.solo_tokens_per_second:,.1f} tok/s**, in one batch "
                f"**{result.batch_tokens_per_second:,.1f} tok/s** (**{result.throughput_ratio:,.2f}×** the "
                f"throughput). The last sequence is done after {result.solo_finished[-1]:,.1f} s one by one, "
                f"{max(result.batch_finished):,.1f} s in the batch. {same}"
            ),
        }


VIEW = BatchingView()
