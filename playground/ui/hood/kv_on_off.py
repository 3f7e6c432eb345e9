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
from playground.plots.hood import kv_on_off as plots
from playground.ui.common import as_whole
from playground.ui.hood.base import BLUE, HoodEnv, LessonView, RunContext, run_row, spans, status, verdict
from playground.ui.ranges import CheckedSlider


class KVOnOffView(LessonView):
    key = "kv"
    lesson = LESSON
    label = "Cache on vs off"
    group = "cost"
    run_label = "Run: cache on vs off"
    explain = (
        "Each new token needs the keys and values of every earlier token. With a **KV cache** they are kept, "
        "so a step reads one new token: flat. Without it, every step recomputes the whole prefix: the step "
        "grows with the text and the total grows quadratically. Same model, same tokens, measured now."
    )
    outputs = ("kv_latency", "kv_cumulative", "kv_bytes", "kv_text")
    main = "kv_latency"
    quick: ClassVar[dict[str, Any]] = {"kv_length": 48, "kv_tokens": 3}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            info = "Tokens of a preset English text read first (longer: a bigger gap)"
            w["kv_length"] = CheckedSlider(
                16,
                2000,
                value=400,
                step=1,
                label="prompt length (tokens)",
                info=info,
                elem_id="hood-kv-length",
            )
            w["kv_tokens"] = CheckedSlider(
                2,
                64,
                value=12,
                step=1,
                label="new tokens",
                info="Greedy tokens generated each way",
                elem_id="hood-kv-tokens",
            )
        run_row(w, self)
        w["kv_latency"] = gr.Plot(
            label="time per token: prefill apart, then each decode step", elem_id="hood-kv-latency"
        )
        with gr.Row():
            w["kv_cumulative"] = gr.Plot(label="cumulative time", elem_id="hood-kv-cumulative")
            w["kv_bytes"] = gr.Plot(label="KV cache bytes: measured vs the formula", elem_id="hood-kv-bytes")
        w["kv_text"] = gr.HTML(elem_id="hood-kv-text")

    def run(self, ctx: RunContext, kv_length: float, kv_tokens: float) -> Iterator[dict[str, Any]]:
        """KV cache on vs off: the same greedy continuation both ways, redrawn after every token."""
        length = whole_in_range(as_whole(kv_length, "prompt length"), 16, 4000, "Prompt length")
        ids = preset_ids(ctx.engine.tokenizer, length)
        result = None
        for result in kv_on_off_lesson.iter_run(
            ctx.engine, ids, as_whole(kv_tokens, "new tokens"), ctx.control
        ):
            yield self.views(ctx.engine, result, final=False)
        if result is not None:
            yield self.views(ctx.engine, result, final=True)

    def views(self, lm: Engine, result: KVOnOff, final: bool) -> dict[str, Any]:
        """Figures (redrawn every step) and, at the end, the summary and both continuations."""
        views: dict[str, Any] = {
            **status(self, f"{result.phase} · prompt {result.prompt_tokens:,} tokens", final),
            "kv_latency": plots.step_latency_figure(
                result.cached_prefill_seconds,
                result.recomputed_prefill_seconds,
                result.cached_step_seconds,
                result.recomputed_step_seconds,
            ),
            "kv_cumulative": plots.cumulative_figure(result.cumulative(True), result.cumulative(False)),
            "kv_bytes": plots.cache_bytes_figure(
                result.cache_lengths, result.cache_bytes, result.formula_bytes
            ),
        }
        if final:
            views["kv_summary"] = summary(result)
            views["kv_text"] = (
                f"<p><b>With the cache:</b> {spans(lm.tokenizer, result.cached_ids, BLUE)}</p>"
                f"<p><b>Without:</b> {spans(lm.tokenizer, result.recomputed_ids, BLUE)}</p>"
                f"<p>Tokens: <b>{'identical ✓' if result.identical else 'DIFFERENT ✗'}</b></p>"
            )
        return views


def summary(result: KVOnOff) -> str:
    per_token = result.formula_bytes[0] // max(result.cache_lengths[0], 1)
    lines = [
        f"{verdict(result.identical, 'Tokens: identical', 'Tokens: different')} ({len(result.cached_ids)} "
        "greedy tokens each way).",
        f"Prefill (time to first token): {result.cached_prefill_seconds * 1000:,.0f} ms with the cache, "
        f"{result.recomputed_prefill_seconds * 1000:,.0f} ms without: the same work.",
    ]
    if result.cached_step_seconds:
        cached = statistics.median(result.cached_step_seconds) * 1000
        recomputed = statistics.median(result.recomputed_step_seconds) * 1000
        lines.append(
            f"Median decode step: **{cached:,.1f} ms** with the cache vs **{recomputed:,.0f} ms** without "
            f"(**{result.step_ratio:,.1f}×**)."
        )
    formula = "exactly the formula ✓" if result.bytes_match else "NOT the formula ✗"
    lines.append(
        f"The cache grew by {per_token:,} bytes per token ({result.dtype}), {formula} of the KV cache tab: "
        f"{result.cache_bytes[-1]:,} bytes after {result.cache_lengths[-1]:,} tokens."
    )
    return "\n\n".join(lines)


VIEW = KVOnOffView()
