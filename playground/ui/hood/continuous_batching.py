"""The view of the lesson "Continuous batching" (playground/hood/continuous_batching.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import gradio as gr

from playground.engine.base import DecodePlan, Engine
from playground.engine.control import Control
from playground.engine.sampling import SamplingSettings
from playground.engine.schedule import Iteration
from playground.errors import PlaygroundError
from playground.hood import continuous_batching as continuous_batching_lesson
from playground.hood.continuous_batching import LESSON, MAX_REQUESTS, Arrival, ContinuousBatching
from playground.plots.hood import continuous_batching as plots
from playground.ui.common import Widgets, as_whole, connect
from playground.ui.hood.base import HoodEnv, LessonView, RunContext, TabServices, run_row, status, verdict
from playground.ui.ranges import CheckedSlider

# arrival iteration | new tokens | prompt: one request per line
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
CROWD_TEXT = "Tell me one fact about the sea."
CROWD_TIMEOUT_S = 120.0  # a crowd still running then is stopped (its model slot is needed)


class ContinuousBatchingView(LessonView):
    key = "cb"
    lesson = LESSON
    label = "Continuous batching"
    group = "serving"
    run_label = "Run: running batch vs static batch"
    explain = (
        "A server serves many users in **one batch**. A **static** batch waits for its last member, pads "
        "every prompt to the longest and keeps every row until the longest answer is done. **Continuous "
        "batching** schedules per iteration: a new request joins at the next forward, its prompt is read in "
        "chunks that share the token budget with everyone's next token, and a finished one leaves at once."
    )
    outputs = ("cb_gantt", "cb_latency")
    main = "cb_gantt"
    quick: ClassVar[dict[str, Any]] = {}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        first = next(iter(PRESETS))
        with gr.Row():
            w["cb_preset"] = gr.Dropdown(list(PRESETS), value=first, label="scenario", scale=3)
            w["cb_budget"] = CheckedSlider(
                4,
                256,
                value=16,
                step=1,
                label="tokens per iteration",
                info="Decodes first, then prompt chunks",
            )
        w["cb_requests"] = gr.Textbox(
            PRESETS[first],
            lines=3,
            max_lines=12,
            label="requests: arrival iteration | new tokens | prompt",
            info=f"One per line, at most {MAX_REQUESTS}; greedy decoding",
        )
        run_row(w, self)
        w["cb_gantt"] = gr.Plot(label="the running batch, iteration by iteration")
        w["cb_latency"] = gr.Plot(label="forwards from arrival until done")
        with gr.Row(elem_classes=["stage-hide"]):
            w["crowd_n"] = CheckedSlider(2, 16, value=6, step=1, label="users", scale=2)
            w["crowd_run"] = gr.Button(
                "Crowd: send them to this app's engine", scale=2, elem_id="hood-crowd-run"
            )
        w["crowd_status"] = gr.Markdown(elem_id="hood-crowd-status")
        w["crowd_gantt"] = gr.Plot(
            label="their live schedule in the app's own batch", elem_id="hood-crowd-gantt"
        )

    def run(self, ctx: RunContext, cb_requests: str, cb_budget: float) -> Iterator[dict[str, Any]]:
        """The requests through the engine's scheduler, then as one static padded batch, then alone."""
        requests = parse_requests(ctx.engine, cb_requests)
        result = None
        for result in continuous_batching_lesson.iter_run(
            ctx.engine, requests, as_whole(cb_budget, "tokens per iteration"), ctx.control
        ):
            yield self.views(result, final=False)
        if result is not None:
            yield self.views(result, final=True)

    def views(self, result: ContinuousBatching, final: bool) -> dict[str, Any]:
        names = [f"#{i + 1}" for i in range(len(result.requests))]
        done = {names[i]: at for i, at in enumerate(result.finished_at) if at >= 0}
        views: dict[str, Any] = {
            **status(self, result.phase, final),
            "cb_gantt": plots.gantt_figure(
                cells(result.schedule, result.requests, result.finished_at), names, done
            ),
        }
        if final:
            views["cb_latency"] = plots.latency_figure(names, *latencies(result))
            views["cb_summary"] = summary(result)
        return views

    def wire(self, w: Widgets, tab: TabServices) -> None:
        def cb_preset(cb_preset: str) -> dict[str, Any]:
            return {"cb_requests": PRESETS.get(cb_preset, "")}

        def hood_crowd(crowd_n: float, request: gr.Request = None) -> dict[str, Any]:
            """N synthetic users at once on the app's own engine: their schedule in its running batch."""
            ctx = tab.context(request, "crowd")
            return crowd(ctx.engine, as_whole(crowd_n, "users"))

        connect(w["cb_preset"].input, cb_preset, w, ["cb_requests"], api_name=None, model=False)
        connect(
            w["crowd_run"].click,
            hood_crowd,
            w,
            ["crowd_status", "crowd_gantt"],
            api_name="hood_crowd",
            status="crowd_status",
        )


def parse_requests(lm: Engine, text: str) -> list[Arrival]:
    """'arrival | new tokens | prompt' lines into requests (each error names its line)."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        raise PlaygroundError("No requests: write one per line as 'arrival iteration | new tokens | prompt'.")
    requests = []
    for number, line in enumerate(lines, start=1):
        parts = [part.strip() for part in line.split("|", 2)]
        if len(parts) != 3 or not parts[2]:
            raise PlaygroundError(f"Line {number} is not 'arrival | new tokens | prompt': {line!r}.")
        at, new = (
            as_whole(parts[0], f"line {number}'s arrival"),
            as_whole(parts[1], f"line {number}'s new tokens"),
        )
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


def summary(result: ContinuousBatching) -> str:
    widths = [len(r.prompt) for r in result.requests]
    pad_prompts = sum(max(widths) - w for w in widths)
    running, static = latencies(result)
    same = verdict(
        result.identical, "Every request's tokens equal its solo run, both ways", "Some tokens differ"
    )
    return (
        f"{len(result.requests)} requests, {result.budget} tokens per iteration: the running batch took "
        f"**{len(result.schedule)} iterations** ({result.tokens_per_second:,.1f} tok/s); one static padded "
        f"batch took {max(result.static_steps, default=0)} forwards after the last arrival "
        f"({result.static_tokens_per_second:,.1f} tok/s). The static batch computed "
        f"**{result.padding_tokens:,} padding tokens**: {pad_prompts:,} to pad the prompts to the longest "
        f"({max(widths)} tokens), {result.padding_tokens - pad_prompts:,} fed to rows already done. Mean "
        f"forwards from arrival to done: **{sum(running) / len(running):.1f}** running vs "
        f"{sum(static) / len(static):.1f} static. {same}"
    )


def crowd(lm: Engine, users: int) -> dict[str, Any]:
    """Send `users` short greedy chats to the engine at once and draw their schedule from its log."""
    batcher = lm.schedule
    if batcher is None:
        raise PlaygroundError(
            "This app runs without continuous batching (PLAYGROUND_BATCHING=off or a remote engine)."
        )
    if not 1 <= users <= 16:
        raise PlaygroundError(f"users must be a whole number from 1 to 16, got {users}.")
    stamp, start = f"crowd-{time.time_ns()}", batcher.iterations
    ids = lm.tokenizer(CROWD_TEXT).input_ids
    control, errors = Control(), []
    threads = [
        threading.Thread(target=_one_user, args=(lm, ids, f"{stamp}-{i + 1}", i, control, errors))
        for i in range(users)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + CROWD_TIMEOUT_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    control.cancel()  # the ones still running after the deadline stop at their next token
    log = [it for it in list(batcher.log) if it.index >= start]
    names = [f"user {i + 1}" for i in range(users)]
    shown = [
        plots.Cell(_user(job.name, stamp), it.index - start, job.kind, job.tokens)
        for it in log
        for job in it.jobs
    ]
    rows = names + (["others"] if any(c.row == "others" for c in shown) else [])
    most = max((len(it.jobs) for it in log), default=0)
    failed = f" **{len(errors)} of {users} failed**: {errors[0]}" if errors else ""
    return {
        "crowd_status": f"{users - len(errors)} users served in **{len(log)} iterations** of the app's "
        f"batch, up to **{most}** requests in one forward (others' requests, if any, are shown too).{failed}",
        "crowd_gantt": plots.gantt_figure(shown, rows, {}),
    }


def _one_user(lm: Engine, ids: list[int], key: str, i: int, control: Control, errors: list[str]) -> None:
    plan = DecodePlan(SamplingSettings(temperature=0), 6 + 2 * (i % 4), seed=i)
    try:
        for _ in lm.stream(ids, plan, key=key, control=control):
            pass
    except Exception as exc:  # each user's failure is counted and named, none stops the others
        errors.append(f"user {i + 1}: {exc}")
    finally:
        lm.release(key)


def _user(name: str, stamp: str) -> str:
    return f"user {name.rsplit('-', 1)[1]}" if name.startswith(stamp) else "others"


VIEW = ContinuousBatchingView()
