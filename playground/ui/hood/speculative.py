"""The view of the lesson "Speculative decoding" (playground/hood/speculative.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import gradio as gr

from playground.engine.base import Engine
from playground.engine.prompts import encode_prompt
from playground.engine.sampling import SamplingSettings
from playground.engine.tokens import token_texts
from playground.hood import speculative as speculative_lesson
from playground.hood.speculative import LESSON, MAX_DRAFT, SpeculativeResult
from playground.plots.hood import speculative as plots
from playground.ui.common import UncheckedSlider, Widgets, as_number, as_whole, connect, parse_seed
from playground.ui.hood.base import (
    BLUE,
    GREEN,
    RED,
    HoodEnv,
    LessonView,
    RunContext,
    TabServices,
    run_row,
    spans,
    status,
)
from playground.ui.ranges import CheckedSlider

COPY_PARAGRAPH = (
    "The old lighthouse stood on the cliff for two hundred years. Every night its keeper climbed the "
    "spiral stairs, trimmed the wick and polished the great lens until it shone. Ships passing in the "
    "storm saw its beam and turned away from the rocks below."
)
PRESETS = {
    "Copy a paragraph with one word changed (copy-heavy)": (
        "Copy the following paragraph exactly, but change the word 'old' to 'ancient':\n\n" + COPY_PARAGRAPH
    ),
    "Fix a bug and return the whole function (copy-heavy)": (
        "Fix the bug in this function and return the whole corrected function:\n\n"
        "def average(values):\n    total = 0\n    for value in values:\n        total += value\n"
        "    return total / len(value)\n"
    ),
    "Write a new story (little to copy)": "Write a short story about a robot who learns to paint.",
}
METHODS = {
    "prompt lookup (n-grams of the context)": "prompt_lookup",
    "early exit (the model's first k layers)": "early_exit",
    "draft model (--draft-model)": "draft",
}
MAX_TOKENS = 256
COLUMNS = ["round", "drafted", "p (model)", "q (draft)", "test", "result"]


class SpeculativeView(LessonView):
    key = "spec"
    lesson = LESSON
    label = "Speculative decoding"
    group = "faster"
    run_label = "Run: plain, then speculative"
    explain = (
        "**Speculative decoding** drafts a few tokens cheaply, then the model checks them all in **one** "
        "forward: each draft is kept while it matches what the model would have produced, then the model "
        "adds its own next token. Greedy output stays exactly the same; with sampling, the min(1, p/q) test "
        "keeps the distribution exact. Speed comes from fewer forwards of the big model."
    )
    outputs = ("spec_rounds", "spec_accept", "spec_speed", "spec_checks")
    main = "spec_rounds"
    tables: ClassVar[dict[str, list[str]]] = {"spec_checks": COLUMNS}
    quick: ClassVar[dict[str, Any]] = {"spec_tokens": 8}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        first = next(iter(PRESETS))
        with gr.Row():
            w["spec_preset"] = gr.Dropdown(
                list(PRESETS), value=first, label="preset", scale=2, elem_classes=["stage-hide"]
            )
            w["spec_chat"] = gr.Checkbox(
                True, label="chat", info="Wrap the prompt as a user turn", elem_classes=["stage-hide"]
            )
        w["spec_prompt"] = gr.Textbox(PRESETS[first], label="prompt", lines=4)
        draft_note = "" if env.draft is not None else " (start the app with --draft-model to use one)"
        w["spec_method"] = gr.Radio(
            list(METHODS),
            value=next(iter(METHODS)),
            label="draft source" + draft_note,
            elem_id="hood-spec-method",
        )
        with gr.Row():
            w["spec_k"] = UncheckedSlider(
                1, MAX_DRAFT, value=6, step=1, label="draft length", info="Tokens drafted per round"
            )
            w["spec_exit"] = UncheckedSlider(
                # Gradio refuses minimum == maximum (a 2-layer model: 1 is the only choice)
                1,
                max(2, env.layers - 1),
                value=max(1, env.layers * 3 // 4),
                step=1,
                label="early exit: k layers",
                info=f"The draft: the first k layers, final norm, head (all {env.layers}: the model itself)",
            )
            w["spec_tokens"] = UncheckedSlider(
                8, MAX_TOKENS, value=64, step=1, label="new tokens", elem_id="hood-spec-tokens"
            )
            w["spec_temperature"] = CheckedSlider(
                0, 1.5, value=0, step=0.05, label="temperature", info="0 = greedy (exact match test)"
            )
        w["spec_seed"] = gr.Textbox(
            "0", label="seed", info="For sampling and the accept draws", elem_classes=["stage-hide"]
        )
        run_row(w, self)
        w["spec_rounds"] = gr.HTML(elem_id="hood-spec-rounds")
        with gr.Row():
            w["spec_accept"] = gr.Plot(
                label="each round: accepted, rejected, bonus", elem_id="hood-spec-accept"
            )
            w["spec_speed"] = gr.Plot(label="tokens out over time")
        w["spec_checks"] = gr.Dataframe(
            headers=COLUMNS, label="every accept test", interactive=False, max_height=320
        )

    def run(
        self,
        ctx: RunContext,
        spec_prompt: str,
        spec_chat: bool,
        spec_method: str,
        spec_k: float,
        spec_exit: float,
        spec_tokens: float,
        spec_temperature: float,
        spec_seed: Any,
    ) -> Iterator[dict[str, Any]]:
        """Plain decoding, then speculative decoding of the same prompt in the same run."""
        ids = encode_prompt(ctx.engine.tokenizer, spec_prompt or "", bool(spec_chat))
        method = METHODS.get(spec_method, spec_method)
        seed = parse_seed(spec_seed)
        exit_layer = as_whole(spec_exit, "exit layer k")  # read for every method: a bad one is named
        options = {
            "draft_tokens": as_whole(spec_k, "draft length"),
            "exit_layer": exit_layer if method == "early_exit" else None,
            "draft": ctx.draft,
            "settings": SamplingSettings(temperature=as_number(spec_temperature, "temperature")),
            "seed": 0 if seed is None else seed,
        }
        tokens, result = as_whole(spec_tokens, "new tokens"), None
        steps = speculative_lesson.iter_run(
            ctx.engine, ids, tokens, method, compare=True, control=ctx.control, **options
        )
        for result in steps:
            yield self.views(ctx.engine, result, final=False)
        if result is not None:
            yield self.views(ctx.engine, result, final=True)

    def views(self, lm: Engine, result: SpeculativeResult, final: bool) -> dict[str, Any]:
        """Status while running; the rounds, figures, table and summary after each round."""
        views: dict[str, Any] = status(self, result.phase, final)
        if not result.rounds:
            return views
        rounds = result.rounds
        times, tokens, total = [], [], 0
        for r in rounds:
            total += len(r.emitted)
            times.append(r.finished_at)
            tokens.append(total)
        views["spec_rounds"] = rounds_html(lm, result)
        views["spec_accept"] = plots.acceptance_figure(
            [len(r.drafted) for r in rounds],
            [r.accepted for r in rounds],
            [r.bonus is not None for r in rounds],
        )
        views["spec_speed"] = plots.speed_figure(result.plain_times, times, tokens)
        views["spec_checks"] = check_rows(lm, result)
        if final:
            views["spec_summary"] = summary(result)
        return views

    def wire(self, w: Widgets, tab: TabServices) -> None:
        def spec_preset(spec_preset: str) -> dict[str, Any]:
            """A preset's prompt into the prompt box (no model)."""
            return {"spec_prompt": PRESETS.get(spec_preset, "")}

        connect(w["spec_preset"].input, spec_preset, w, ["spec_prompt"], api_name=None, model=False)


def rounds_html(lm: Engine, result: SpeculativeResult) -> str:
    rows = []
    for n, r in enumerate(result.rounds, start=1):
        kept = spans(lm.tokenizer, r.drafted[: r.accepted], GREEN)
        rejected = spans(lm.tokenizer, r.drafted[r.accepted :], RED, strike=True)
        bonus = spans(lm.tokenizer, [r.bonus], BLUE) if r.bonus is not None else ""
        rows.append(f"<div><small>round {n}</small> {kept}{rejected} → {bonus}</div>")
    legend = (
        f"<small><span style='background:{GREEN}'>accepted draft</span> · "
        f"<span style='background:{RED};text-decoration:line-through'>rejected draft</span> · "
        f"<span style='background:{BLUE}'>the model's own token (bonus)</span></small>"
    )
    style = "line-height:1.9;font-family:ui-monospace,monospace;font-size:13px"
    return f"{legend}<div class='hood-rounds' style='{style}'>{''.join(rows)}</div>"


def check_rows(lm: Engine, result: SpeculativeResult) -> list[list[Any]]:
    rows = []
    for n, r in enumerate(result.rounds, start=1):
        for c in r.checks:
            if result.greedy:
                test = "= the model's top token" if c.accepted else "≠ the model's top token"
            else:
                test = f"r = {c.draw:.3f} {'<' if c.accepted else '≥'} min(1, p/q) = {c.threshold:.3f}"
            piece = token_texts(lm.tokenizer, [c.token])[0].visible
            verdict = "accepted" if c.accepted else "rejected"
            rows.append([n, piece, round(c.target_prob, 4), round(c.draft_prob, 4), test, verdict])
    return rows


def summary(result: SpeculativeResult) -> str:
    method = next(label for label, name in METHODS.items() if name == result.method)
    depth = f", k = {result.exit_layer} layers" if result.exit_layer else ""
    lines = [
        f"**{method}**{depth}, up to {result.draft_tokens} drafts per round: {len(result.ids)} tokens in "
        f"{len(result.rounds)} rounds ({len(result.rounds)} forwards of the model instead of "
        f"{len(result.ids)}) · acceptance **{result.acceptance_rate:.0%}**"
    ]
    if result.plain_tokens_per_second:
        lines.append(
            f"Plain decoding {result.plain_tokens_per_second:,.2f} tok/s vs speculative "
            f"{result.tokens_per_second:,.2f} tok/s: **{result.speedup:,.2f}×** (same run, same machinery)"
        )
    if result.speedup is not None and result.speedup < 1:
        lines.append(
            "Slower here: every round pays for its drafts, and too few were accepted to save forwards. "
            "A draft pays off when it is much cheaper than the model and usually right (the logit lens "
            "shows how late this model's layers settle on their answer)."
        )
    if result.identical is not None:
        lines.append(
            "**Identical to plain greedy decoding ✓**"
            if result.identical
            else "**DIFFERENT from plain greedy ✗**"
        )
    else:
        lines.append(
            "Sampled: the tokens differ from a plain run, but follow the model's distribution exactly."
        )
    return "\n\n".join(lines)


VIEW = SpeculativeView()
