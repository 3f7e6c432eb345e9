"""The view of the lesson "Sampling order" (playground/hood/sampling_order.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import gradio as gr

from playground.engine.base import Engine
from playground.engine.prompts import encode_prompt
from playground.engine.sampling import SamplingSettings
from playground.engine.tokens import token_texts
from playground.errors import PlaygroundError
from playground.hood import sampling_order as sampling_order_lesson
from playground.hood.sampling_order import LESSON, MAX_DRAWS, Histogram, SamplingOrder
from playground.plots.hood import sampling_order as plots
from playground.ui.common import UncheckedSlider, as_number, as_whole, parse_seed
from playground.ui.hood.base import HoodEnv, LessonView, RunContext, run_row, status

TEXT = "The capital of France is"
SHOWN = 12  # tokens in the figures


class SamplingOrderView(LessonView):
    key = "order"
    lesson = LESSON
    label = "Sampling order"
    group = "tokens"
    run_label = "Run: both orders, then sample"
    explain = (
        "The sampling stages run in an order. `generate` divides by the **temperature first**, then cuts "
        "with top-p, so a high temperature lets more tokens through the same p. Cut first and temper "
        "after, and the kept set and its probabilities change. Then **sample N times**: the frequencies "
        "approach the probabilities as N grows."
    )
    outputs = ("order_orders", "order_hist", "order_tv")
    main = "order_orders"
    quick: ClassVar[dict[str, Any]] = {"order_n": 300}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["order_text"] = gr.Textbox(
                TEXT, label="prefix", lines=1, scale=3, info="The next token after it"
            )
            w["order_from_step"] = gr.Checkbox(
                True, label="at the Step tab's step", info="Use its prompt and path when it has one"
            )
        w["order_submit"] = w["order_text"]
        with gr.Row():
            w["order_temperature"] = UncheckedSlider(0.05, 3, value=1.6, step=0.05, label="temperature")
            w["order_top_p"] = UncheckedSlider(0.05, 1, value=0.8, step=0.01, label="top-p")
            w["order_top_k"] = UncheckedSlider(0, 200, value=0, step=1, label="top-k", info="0 = off")
            w["order_n"] = UncheckedSlider(
                10, MAX_DRAWS, value=2000, step=10, label="draws (N)", info=f"Up to {MAX_DRAWS:,}, seeded"
            )
            w["order_seed"] = gr.Textbox("0", label="seed", elem_classes=["stage-hide"])
        run_row(w, self)
        w["order_orders"] = gr.Plot(label="the same tokens, temperature before vs after the cut")
        with gr.Row():
            w["order_hist"] = gr.Plot(label="drawn N times vs the probabilities")
            w["order_tv"] = gr.Plot(label="how far the frequencies are from the probabilities")

    def run(
        self,
        ctx: RunContext,
        order_text: str,
        order_from_step: bool,
        order_temperature: float,
        order_top_p: float,
        order_top_k: float,
        order_n: float,
        order_seed: Any,
    ) -> Iterator[dict[str, Any]]:
        """Both orders of temperature and the cuts at one position, then N seeded draws."""
        ids, source = self.prefix(ctx, order_text, bool(order_from_step))
        settings = SamplingSettings(
            temperature=as_number(order_temperature, "temperature"),
            top_p=as_number(order_top_p, "top-p"),
            top_k=as_whole(order_top_k, "top-k"),
        )
        n, seed = as_whole(order_n, "draws (N)"), parse_seed(order_seed) or 0
        order: SamplingOrder | None = None
        for result in sampling_order_lesson.iter_run(ctx.engine, ids, settings, n, seed, ctx.control):
            if isinstance(result, SamplingOrder):
                order = result
                yield {
                    **status(self, f"{source}: both orders computed, drawing {n:,} tokens…", False),
                    "order_orders": orders_view(ctx.engine, order),
                }
            elif order is not None:
                final = result.tv_by_draws[-1][0] == n
                yield self.views(ctx.engine, order, result, source, final)

    def prefix(self, ctx: RunContext, text: str, from_step: bool) -> tuple[list[int], str]:
        """The Step tab's prompt and path when asked and there is one; else the prefix box."""
        session = ctx.workspace.step
        if from_step and session is not None:
            with session.locked():
                return list(session.ids), f"the Step tab's step ({len(session.ids)} tokens)"
        if not (text or "").strip():
            raise PlaygroundError("The prefix is empty: type some text, or start a Step by step session.")
        return encode_prompt(ctx.engine.tokenizer, text, False), "the prefix"

    def views(
        self, lm: Engine, order: SamplingOrder, hist: Histogram, source: str, final: bool
    ) -> dict[str, Any]:
        shown = order.top(SHOWN)
        labels = _labels(lm, order, shown)
        frequencies = [hist.counts.get(t, 0) / hist.tv_by_draws[-1][0] for t in shown]
        drawn = hist.tv_by_draws[-1][0]
        views: dict[str, Any] = {
            **status(self, f"{source}: {drawn:,}/{hist.n:,} draws", final),
            "order_hist": plots.histogram_figure(
                labels, [float(order.before[t]) for t in shown], frequencies, drawn
            ),
            "order_tv": plots.tv_figure([d for d, _ in hist.tv_by_draws], [tv for _, tv in hist.tv_by_draws]),
        }
        if final:
            views["order_summary"] = summary(lm, order, hist)
        return views


def orders_view(lm: Engine, order: SamplingOrder) -> Any:
    shown = order.top(SHOWN)
    return plots.orders_figure(
        _labels(lm, order, shown),
        [float(order.raw[t]) for t in shown],
        [float(order.before[t]) for t in shown],
        [float(order.after[t]) for t in shown],
    )


def _labels(lm: Engine, order: SamplingOrder, ids: list[int]) -> list[str]:
    """Token labels in context (a byte piece names its character); ✂ marks a token one order cuts."""
    texts = token_texts(lm.tokenizer, ids)
    one_only = order.kept_before ^ order.kept_after
    return [
        f"{text.visible}{' ✂' if token in one_only else ''}" for token, text in zip(ids, texts, strict=True)
    ]


def summary(lm: Engine, order: SamplingOrder, hist: Histogram) -> str:
    before, after = order.kept_before, order.kept_after
    only_before, only_after = len(before - after), len(after - before)
    start, end = hist.tv_by_draws[0], hist.tv_by_draws[-1]
    s = order.settings
    return (
        f"At T = {s.temperature:g}, top-p = {s.top_p:g}{f', top-k = {s.top_k}' if s.top_k else ''}: "
        f"**temperature first** (generate's order) keeps **{len(before):,}** tokens, **the cut first** keeps "
        f"**{len(after):,}** ({only_before:,} kept only by the first, {only_after:,} only by the second). "
        f"The two distributions differ by a total-variation distance of **{order.difference:.3f}** "
        f"(0 = the same, 1 = nothing in common).\n\n"
        f"Sampling {hist.n:,} times (seed {hist.seed}) from generate's order: the frequencies are "
        f"**{end[1]:.3f}** from the probabilities in total variation, after {start[1]:.3f} at {start[0]:,} "
        "draws: sampling follows the distribution, and more draws follow it closer."
    )


VIEW = SamplingOrderView()
