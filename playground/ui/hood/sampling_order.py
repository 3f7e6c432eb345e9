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
from playground.ui.i18n import DEFAULT, i18n, t

TEXT = "The capital of France is"
SHOWN = 12  # tokens in the figures


class SamplingOrderView(LessonView):
    key = "order"
    lesson = LESSON
    label = "hood.order.label"
    group = "tokens"
    run_label = "hood.order.run"
    action = "hood.order.action"
    explain = "hood.order.explain"
    outputs = ("order_orders", "order_hist", "order_tv")
    main = "order_orders"
    quick: ClassVar[dict[str, Any]] = {"order_n": 300}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["order_text"] = gr.Textbox(
                TEXT, label=i18n("hood.order.text"), lines=1, scale=3, info=i18n("hood.order.text.info")
            )
            w["order_from_step"] = gr.Checkbox(
                True, label=i18n("hood.order.from_step"), info=i18n("hood.order.from_step.info")
            )
        w["order_submit"] = w["order_text"]
        with gr.Row():
            w["order_temperature"] = UncheckedSlider(
                0.05, 3, value=1.6, step=0.05, label=i18n("hood.order.temperature")
            )
            w["order_top_p"] = UncheckedSlider(0.05, 1, value=0.8, step=0.01, label="top-p")
            w["order_top_k"] = UncheckedSlider(
                0, 200, value=0, step=1, label="top-k", info=i18n("hood.order.top_k.info")
            )
            w["order_n"] = UncheckedSlider(
                10,
                MAX_DRAWS,
                value=2000,
                step=10,
                label=i18n("hood.order.n"),
                info=i18n("hood.order.n.info"),  # says MAX_DRAWS
            )
            w["order_seed"] = gr.Textbox("0", label=i18n("hood.order.seed"), elem_classes=["stage-hide"])
        run_row(w, self)
        w["order_orders"] = gr.Plot(label=i18n("hood.order.plot.orders"))
        with gr.Row():
            w["order_hist"] = gr.Plot(label=i18n("hood.order.plot.hist"))
            w["order_tv"] = gr.Plot(label=i18n("hood.order.plot.tv"))

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
        lang = ctx.lang
        ids, source = self.prefix(ctx, order_text, bool(order_from_step))
        settings = SamplingSettings(
            temperature=as_number(order_temperature, t("hood.order.temperature", lang)),
            top_p=as_number(order_top_p, "top-p"),
            top_k=as_whole(order_top_k, "top-k"),
        )
        n, seed = as_whole(order_n, t("hood.order.n", lang)), parse_seed(order_seed) or 0
        order: SamplingOrder | None = None
        for result in sampling_order_lesson.iter_run(ctx.engine, ids, settings, n, seed, ctx.control):
            if isinstance(result, SamplingOrder):
                order = result
                yield {
                    **status(self, t("hood.order.phase.drawing", lang, source=source, n=n), False, lang),
                    "order_orders": orders_view(ctx.engine, order, lang),
                }
            elif order is not None:
                final = result.tv_by_draws[-1][0] == n
                yield self.views(ctx.engine, order, result, source, final, lang)

    def prefix(self, ctx: RunContext, text: str, from_step: bool) -> tuple[list[int], str]:
        """The Step tab's prompt and path when asked and there is one; else the prefix box."""
        session = ctx.workspace.step
        if from_step and session is not None:
            with session.locked():
                return list(session.ids), t("hood.order.source.step", ctx.lang, tokens=len(session.ids))
        if not (text or "").strip():
            raise PlaygroundError(
                "The prefix is empty: type some text, or start a Step by step session.",
                key="hood.order.error.empty",
            )
        return encode_prompt(ctx.engine.tokenizer, text, False), t("hood.order.source.prefix", ctx.lang)

    def views(
        self, lm: Engine, order: SamplingOrder, hist: Histogram, source: str, final: bool, lang: str = DEFAULT
    ) -> dict[str, Any]:
        shown = order.top(SHOWN)
        labels = _labels(lm, order, shown)
        frequencies = [hist.counts.get(token, 0) / hist.tv_by_draws[-1][0] for token in shown]
        drawn = hist.tv_by_draws[-1][0]
        phase = t("hood.order.phase.draws", lang, source=source, drawn=drawn, n=hist.n)
        views: dict[str, Any] = {
            **status(self, phase, final, lang),
            "order_hist": plots.histogram_figure(
                labels, [float(order.before[token]) for token in shown], frequencies, drawn, lang
            ),
            "order_tv": plots.tv_figure(
                [d for d, _ in hist.tv_by_draws], [tv for _, tv in hist.tv_by_draws], lang
            ),
        }
        if final:
            views["order_summary"] = summary(lm, order, hist, lang)
        return views


def orders_view(lm: Engine, order: SamplingOrder, lang: str = DEFAULT) -> Any:
    shown = order.top(SHOWN)
    return plots.orders_figure(
        _labels(lm, order, shown),
        [float(order.raw[token]) for token in shown],
        [float(order.before[token]) for token in shown],
        [float(order.after[token]) for token in shown],
        lang,
    )


def _labels(lm: Engine, order: SamplingOrder, ids: list[int]) -> list[str]:
    """Token labels in context (a byte piece names its character); ✂ marks a token one order cuts."""
    texts = token_texts(lm.tokenizer, ids)
    one_only = order.kept_before ^ order.kept_after
    return [
        f"{text.visible}{' ✂' if token in one_only else ''}" for token, text in zip(ids, texts, strict=True)
    ]


def summary(lm: Engine, order: SamplingOrder, hist: Histogram, lang: str = DEFAULT) -> str:
    before, after = order.kept_before, order.kept_after
    start, end = hist.tv_by_draws[0], hist.tv_by_draws[-1]
    s = order.settings
    orders = t(
        "hood.order.sum.orders",
        lang,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=f", top-k = {s.top_k}" if s.top_k else "",
        before=len(before),
        after=len(after),
        only_before=len(before - after),
        only_after=len(after - before),
        difference=order.difference,
    )
    draws = t(
        "hood.order.sum.draws",
        lang,
        n=hist.n,
        seed=hist.seed,
        end=end[1],
        start=start[1],
        first=start[0],
    )
    return f"{orders}\n\n{draws}"


VIEW = SamplingOrderView()
