"""The view of the lesson "Continuous batching" (playground/hood/continuous_batching.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import gradio as gr

from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.schedule import Iteration
from playground.errors import PlaygroundError
from playground.hood import continuous_batching as continuous_batching_lesson
from playground.hood.continuous_batching import LESSON, Arrival, ContinuousBatching
from playground.plots.hood import continuous_batching as plots
from playground.serving import crowd as serving_crowd
from playground.serving.crowd import CrowdView, iter_crowd
from playground.serving.metrics import Slo
from playground.ui.common import Widgets, as_whole, connect
from playground.ui.hood.base import HoodEnv, LessonView, RunContext, TabServices, run_row, status, verdict
from playground.ui.i18n import DEFAULT, i18n, t
from playground.ui.ranges import CheckedSlider

# arrival iteration | new tokens | prompt: one request per line (the dropdown's values; their labels:
# PRESET_LABELS, in the page's language)
PRESETS = {
    "A long prompt first, two short ones right after (token budget 16)": (
        "0 | 6 | The history of the printing press begins long before Gutenberg, in China and Korea.\n"
        "1 | 4 | Hello\n"
        "1 | 5 | One, two, three,"
    ),
    "Answers of very different lengths": (
        "0 | 24 | Once upon a time\n0 | 4 | The capital of France is\n"
        "0 | 10 | Roses are red,\n2 | 6 | 1, 2, 3,"
    ),
    "A steady stream of arrivals": "\n".join(
        f"{2 * i} | 6 | Question {i + 1}: what is {i + 2} times {i + 3}?" for i in range(6)
    ),
}
PRESET_LABELS = dict(
    zip(PRESETS, ("hood.cb.preset.long", "hood.cb.preset.lengths", "hood.cb.preset.stream"), strict=True)
)
SLO = Slo()  # TTFT <= 2 s, TPOT <= 300 ms: what the crowd's status line counts as served well


class ContinuousBatchingView(LessonView):
    key = "cb"
    lesson = LESSON
    label = "hood.cb.label"
    group = "serving"
    run_label = "hood.cb.run"
    action = "hood.cb.action"
    explain = "hood.cb.explain"
    outputs = ("cb_gantt", "cb_latency")
    main = "cb_gantt"
    quick: ClassVar[dict[str, Any]] = {}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        first = next(iter(PRESETS))
        with gr.Row():
            w["cb_preset"] = gr.Dropdown(
                [(i18n(PRESET_LABELS[name]), name) for name in PRESETS],
                value=first,
                label=i18n("hood.cb.preset"),
                scale=3,
            )
            w["cb_budget"] = CheckedSlider(
                4,
                256,
                value=16,
                step=1,
                label=i18n("hood.cb.budget"),
                info=i18n("hood.cb.budget.info"),
            )
        w["cb_requests"] = gr.Textbox(
            PRESETS[first],
            lines=3,
            max_lines=12,
            label=i18n("hood.cb.requests"),
            info=i18n("hood.cb.requests.info"),  # says MAX_REQUESTS
        )
        run_row(w, self)
        w["cb_gantt"] = gr.Plot(label=i18n("hood.cb.plot.gantt"))
        w["cb_latency"] = gr.Plot(label=i18n("hood.cb.plot.latency"))
        crowd_layout(w)

    def run(self, ctx: RunContext, cb_requests: str, cb_budget: float) -> Iterator[dict[str, Any]]:
        """The requests through the engine's scheduler, then as one static padded batch, then alone."""
        lang = ctx.lang
        requests = parse_requests(ctx.engine, cb_requests, lang)
        budget, result = as_whole(cb_budget, t("hood.cb.budget", lang)), None
        for result in continuous_batching_lesson.iter_run(ctx.engine, requests, budget, ctx.control):
            yield self.views(result, final=False, lang=lang)
        if result is not None:
            yield self.views(result, final=True, lang=lang)

    def views(self, result: ContinuousBatching, final: bool, lang: str = DEFAULT) -> dict[str, Any]:
        names = [f"#{i + 1}" for i in range(len(result.requests))]
        done = {names[i]: at for i, at in enumerate(result.finished_at) if at >= 0}
        views: dict[str, Any] = {
            **status(self, result.phase, final, lang),
            "cb_gantt": plots.gantt_figure(
                cells(result.schedule, result.requests, result.finished_at), names, done, lang
            ),
        }
        if final:
            views["cb_latency"] = plots.latency_figure(names, *latencies(result), lang=lang)
            views["cb_summary"] = summary(result, lang)
        return views

    def wire(self, w: Widgets, tab: TabServices) -> None:
        def cb_preset(cb_preset: str) -> dict[str, Any]:
            return {"cb_requests": PRESETS.get(cb_preset, "")}

        def hood_crowd(
            crowd_rate: float, crowd_requests: float, crowd_bursty: bool, request: gr.Request = None
        ) -> Iterator[dict[str, Any]]:
            """Requests arriving at a rate on the app's own engine: their schedule in its running batch,
            and each one's TTFT and TPOT, live."""
            ctx = tab.context(request, "crowd")
            count = as_whole(crowd_requests, t("hood.crowd.requests", ctx.lang))
            bursty = 0.5 if crowd_bursty else 1.0
            yield from crowd(ctx.engine, float(crowd_rate), count, bursty, ctx.control, ctx.lang)

        connect(w["cb_preset"].input, cb_preset, w, ["cb_requests"], api_name=None, model=False)
        connect(
            w["crowd_run"].click,
            hood_crowd,
            w,
            ["crowd_status", "crowd_gantt", "crowd_latency"],
            api_name="hood_crowd",
            status="crowd_status",
        )


def crowd_layout(w: dict[str, Any]) -> None:
    """The crowd's controls, its status line, and its two live figures side by side."""
    gr.Markdown(i18n("hood.crowd.explain"), elem_classes=["stage-hide"])
    with gr.Row(elem_classes=["stage-hide"]):
        w["crowd_rate"] = CheckedSlider(
            0.1,
            serving_crowd.MAX_RATE,
            value=1.0,
            step=0.1,
            label=i18n("hood.crowd.rate"),
            scale=2,
            elem_id="hood-crowd-rate",
        )
        w["crowd_requests"] = CheckedSlider(
            2,
            serving_crowd.MAX_REQUESTS,
            value=12,
            step=1,
            label=i18n("hood.crowd.requests"),
            scale=2,
            elem_id="hood-crowd-requests",
        )
        w["crowd_bursty"] = gr.Checkbox(
            label=i18n("hood.crowd.bursty"), value=False, scale=1, elem_id="hood-crowd-bursty"
        )
        w["crowd_run"] = gr.Button(i18n("hood.crowd.run"), scale=2, elem_id="hood-crowd-run")
    w["crowd_status"] = gr.Markdown(elem_id="hood-crowd-status")
    with gr.Row():
        w["crowd_gantt"] = gr.Plot(label=i18n("hood.crowd.gantt"), elem_id="hood-crowd-gantt", scale=3)
        w["crowd_latency"] = gr.Plot(label=i18n("hood.crowd.latency"), elem_id="hood-crowd-latency", scale=2)


def parse_requests(lm: Engine, text: str, lang: str = DEFAULT) -> list[Arrival]:
    """'arrival | new tokens | prompt' lines into requests (each error names its line)."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        raise PlaygroundError(
            "No requests: write one per line as 'arrival iteration | new tokens | prompt'.",
            key="hood.cb.error.none",
        )
    requests = []
    for number, line in enumerate(lines, start=1):
        parts = [part.strip() for part in line.split("|", 2)]
        if len(parts) != 3 or not parts[2]:
            raise PlaygroundError(
                "Line {number} is not 'arrival | new tokens | prompt': {line!r}.",
                key="hood.cb.error.line",
                number=number,
                line=line,
            )
        at = as_whole(parts[0], t("hood.cb.line.arrival", lang, number=number))
        new = as_whole(parts[1], t("hood.cb.line.new_tokens", lang, number=number))
        requests.append(Arrival(lm.tokenizer(parts[2]).input_ids, new, at))
    return requests


def cells(
    schedule: Sequence[Iteration], requests: Sequence[Arrival], finished: Sequence[int]
) -> list[plots.Cell]:
    """What every request did in every iteration; a request that has arrived, is not done and got no
    tokens there waits."""
    out = []
    for iteration in schedule:
        ran = {job.name for job in iteration.jobs}
        out += [plots.Cell(job.name, iteration.index, job.kind, job.tokens) for job in iteration.jobs]
        for i, r in enumerate(requests):
            name, end = f"#{i + 1}", finished[i] if finished[i] >= 0 else iteration.index
            if r.at <= iteration.index <= end and name not in ran:
                out.append(plots.Cell(name, iteration.index, "wait"))
    return out


def latencies(result: ContinuousBatching) -> tuple[list[int], list[int]]:
    """Forwards from arrival until done: the running batch, and a static batch that starts after the
    last arrival and hands everything back when its longest answer is done."""
    last = max(r.at for r in result.requests)
    longest = max(result.static_steps, default=0)
    running = [done - r.at + 1 for done, r in zip(result.finished_at, result.requests, strict=True)]
    static = [last - r.at + longest for r in result.requests]
    return running, static


def summary(result: ContinuousBatching, lang: str = DEFAULT) -> str:
    widths = [len(r.prompt) for r in result.requests]
    pad_prompts = sum(max(widths) - w for w in widths)
    running, static = latencies(result)
    same = verdict(result.identical, "hood.cb.sum.equal", "hood.cb.sum.differ", lang)
    return t(
        "hood.cb.summary",
        lang,
        count=len(result.requests),
        budget=result.budget,
        iterations=len(result.schedule),
        tok_s=result.tokens_per_second,
        static_steps=max(result.static_steps, default=0),
        static_tok_s=result.static_tokens_per_second,
        padding=result.padding_tokens,
        pad_prompts=pad_prompts,
        longest=max(widths),
        pad_done=result.padding_tokens - pad_prompts,
        running=sum(running) / len(running),
        static=sum(static) / len(static),
        same=same,
    )


def crowd(
    lm: Engine,
    rate: float,
    count: int,
    burstiness: float = 1.0,
    control: Control | None = None,
    lang: str = DEFAULT,
) -> Iterator[dict[str, Any]]:
    """The crowd (playground/serving/crowd.py) drawn as it goes: the schedule, TTFT and TPOT."""
    for view in iter_crowd(lm, rate, count, burstiness, control):
        yield crowd_views(view, lang)


def crowd_views(view: CrowdView, lang: str = DEFAULT) -> dict[str, Any]:
    names = [t("hood.crowd.request", lang, number=i + 1) for i in range(len(view.requests))]
    others = t("hood.crowd.others", lang)
    cells = [
        plots.Cell(
            _request_row(job.name, view.stamp, lang), it.index - view.first_iteration, job.kind, job.tokens
        )
        for it in view.schedule
        for job in it.jobs
    ]
    rows = names + ([others] if any(c.row == others for c in cells) else [])
    served = [
        plots.Served(name, _kind(timing.kind, lang), timing.sent, timing.ttft, timing.tpot)
        for name, timing in zip(names, view.timings, strict=True)
        if timing.token_times
    ]
    return {
        "crowd_status": crowd_status(view, lang),
        "crowd_gantt": plots.gantt_figure(cells, rows, {}, lang),
        "crowd_latency": plots.serving_figure(served, SLO.ttft_s, SLO.tpot_s, lang),
    }


def crowd_status(view: CrowdView, lang: str = DEFAULT) -> str:
    """What the crowd has got so far, in the field's terms, in the session's language."""
    summary, finished = view.summary(SLO), view.finished
    line = t(
        "hood.crowd.status",
        lang,
        state=t("hood.crowd.done" if view.done else "hood.crowd.running", lang),
        answered=len(finished),
        count=len(view.requests),
        arrived=sum(at <= view.elapsed for at in view.arrivals),
        rate=view.rate,
        bursty=t("hood.crowd.bursty_note", lang) if view.burstiness < 1 else "",
        iterations=len(view.schedule),
        most=max((len(it.jobs) for it in view.schedule), default=0),
    )
    if finished:
        ttft, tpot = summary.latency["ttft"], summary.latency["tpot"]
        na = t("hood.crowd.no_tpot", lang)
        line += t(
            "hood.crowd.figures",
            lang,
            ttft50=ttft["p50"],
            ttft95=ttft["p95"],
            tpot50=_ms(tpot["p50"], na),
            tpot95=_ms(tpot["p95"], na),
            within=summary.attained,
            slo_ttft=SLO.ttft_s,
            slo_tpot=SLO.tpot_s * 1000,
        )
    failed = [timing.error for timing in finished if timing.error]
    if failed:
        line += t("hood.crowd.failed", lang, failed=len(failed), first=failed[0])
    return line


def _ms(seconds: float, na: str) -> str:
    return na if seconds != seconds else f"{seconds * 1000:.0f} ms"  # NaN: no request had two tokens


KINDS = {
    "chat": "hood.crowd.kind.chat",
    "step": "hood.crowd.kind.step",
    "long prompt": "hood.crowd.kind.long",
}


def _kind(kind: str, lang: str) -> str:
    """A crowd request's kind (playground/serving/load.py MIX) in lang."""
    return t(KINDS[kind], lang) if kind in KINDS else kind


def _request_row(name: str, stamp: str, lang: str) -> str:
    if name.startswith(stamp):
        return t("hood.crowd.request", lang, number=name.rsplit("-", 1)[1])
    return t("hood.crowd.others", lang)


VIEW = ContinuousBatchingView()
