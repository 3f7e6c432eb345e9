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
from playground.ui.ranges import CheckedSlider

LENGTHS = [16, 64, 256, 1024, 2048, 4096]
COLUMNS = [
    "prompt tokens",
    "prefill ms",
    "prefill tok/s",
    "decode ms/token",
    "decode tok/s",
    "prefill FLOP/byte",
    "decode FLOP/byte",
    "decode GB/s (est.)",
]


class PrefillDecodeView(LessonView):
    key = "pd"
    lesson = LESSON
    label = "Prefill vs decode"
    group = "cost"
    run_label = "Run: prefill vs decode"
    explain = (
        "**Prefill** reads the whole prompt in one pass: every weight is used for many tokens, so it runs at "
        "compute speed and sets the time to first token. **Decode** makes one token per pass and must read "
        "every weight for it: its speed is set by memory bandwidth, whatever the prompt."
    )
    outputs = ("pd_throughput", "pd_intensity", "pd_table")
    main = "pd_throughput"
    tables: ClassVar[dict[str, list[str]]] = {"pd_table": COLUMNS}
    quick: ClassVar[dict[str, Any]] = {"pd_lengths": [16, 64], "pd_decode": 2}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            info = "Each length: one prefill, then a few decode steps after it"
            w["pd_lengths"] = gr.CheckboxGroup(
                LENGTHS,
                value=[16, 64, 256, 1024, 4096],
                label="prompt lengths",
                info=info,
                elem_id="hood-pd-lengths",
            )
            w["pd_decode"] = CheckedSlider(
                2,
                32,
                value=6,
                step=1,
                label="decode steps per length",
                info="Timed; the median is shown",
                elem_id="hood-pd-decode",
            )
        run_row(w, self)
        with gr.Row():
            w["pd_throughput"] = gr.Plot(label="tokens per second", elem_id="hood-pd-throughput")
            w["pd_intensity"] = gr.Plot(label="arithmetic intensity (FLOPs per byte moved, estimated)")
        w["pd_table"] = gr.Dataframe(headers=COLUMNS, label="measurements", interactive=False)

    def run(self, ctx: RunContext, pd_lengths: list[Any], pd_decode: float) -> Iterator[dict[str, Any]]:
        """Prefill vs decode tokens/s at each chosen prompt length, with the estimated intensity."""
        lengths = [as_whole(n, "prompt length") for n in pd_lengths or []]
        decode, result = as_whole(pd_decode, "decode steps"), None
        for result in prefill_decode_lesson.iter_run(ctx.engine, lengths, decode, ctx.control):
            yield self.views(result, final=False)
        if result is not None:
            yield self.views(result, final=True)

    def views(self, result: PrefillDecode, final: bool) -> dict[str, Any]:
        points = result.points
        lengths = [p.length for p in points]
        views: dict[str, Any] = {
            **status(self, result.phase, final),
            "pd_throughput": plots.throughput_figure(
                lengths,
                [p.prefill_tokens_per_second for p in points],
                [p.decode_tokens_per_second for p in points],
            ),
            "pd_intensity": plots.intensity_figure(
                lengths, [p.prefill.intensity for p in points], [p.decode.intensity for p in points]
            ),
            "pd_table": [row(p) for p in points],
        }
        if final and points:
            views["pd_summary"] = summary(result)
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


def summary(result: PrefillDecode) -> str:
    """The figures over every measured length: the best prefill, the median decode and its range."""
    points = result.points
    best = max(points, key=lambda p: p.prefill_tokens_per_second)
    decode = [p.decode_tokens_per_second for p in points]
    spread = f" ({min(decode):,.1f}–{max(decode):,.1f} over the lengths)" if len(points) > 1 else ""
    weights = result.shape.weight_bytes / 1e6
    intensity = statistics.median(p.decode.intensity for p in points)
    return (
        f"Prefill reads up to **{best.prefill_tokens_per_second:,.0f} tok/s** ({best.length:,}-token "
        f"prompt) while decode makes **{statistics.median(decode):,.1f} tok/s**{spread} on {result.device}. "
        f"Each decode step reads all {weights:,.0f} MB of weights to make one token (about "
        f"{intensity:.2f} FLOP per byte): its speed is set by memory bandwidth "
        f"(~{statistics.median(bandwidth(p) for p in points):,.1f} GB/s here). Prefill multiplies the same "
        f"weights by many tokens at once ({best.prefill.intensity:,.0f} FLOP per byte), so it is limited by "
        f"compute; prompts are read in chunks of {result.chunk} tokens."
    )


VIEW = PrefillDecodeView()
