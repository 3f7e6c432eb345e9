"""The view of the lesson "Why not all at once" (playground/hood/jacobi.py)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterator
from typing import Any, ClassVar

import gradio as gr

from playground.engine.base import Engine
from playground.engine.prompts import encode_prompt
from playground.engine.tokens import cut_off_shown, decode_ids, token_texts
from playground.errors import PlaygroundError
from playground.hood import jacobi as jacobi_lesson
from playground.hood.jacobi import GUESSES, LESSON, MAX_TOKENS, JacobiResult
from playground.plots.hood import jacobi as plots
from playground.ui.common import UncheckedSlider, as_whole
from playground.ui.hood.base import BLUE, GREEN, HoodEnv, LessonView, RunContext, run_row, status, verdict

TEXT = "The capital of France is"
NAR = (
    "**Non-autoregressive models** are built for this picture. A masked LM decoding by *mask-predict* "
    "(BERT-style) or a diffusion LM starts from a canvas of [MASK] tokens, predicts every position in one "
    "forward, keeps the confident ones and predicts the rest again, for a fixed number of rounds. Their "
    "first round contradicts itself the same way (“I love” and “love I”, “capital capital”): each position "
    "is guessed without knowing what the others will say. No masked or diffusion LM ships with this app to "
    "run offline (transformers has DiffusionGemma, but its only checkpoint has 26 B parameters), and this "
    "lesson does not load one from a directory: it shows the same picture on the causal model you have."
)


class JacobiView(LessonView):
    key = "jacobi"
    lesson = LESSON
    label = "Why not all at once"
    group = "faster"
    run_label = "Run: greedy, then Jacobi"
    explain = (
        "Why not predict all the next tokens at once? **Jacobi decoding** tries: guess n tokens, then one "
        "forward rewrites every position with the model's choice after the guess before it, again and again "
        "until nothing changes. It ends exactly on the greedy answer, but each token needs the right ones "
        "before it, so the right prefix grows about one token per round."
    )
    outputs = ("jacobi_grid", "jacobi_progress", "jacobi_time")
    main = "jacobi_grid"
    quick: ClassVar[dict[str, Any]] = {"jacobi_tokens": 5}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["jacobi_text"] = gr.Textbox(
                TEXT, label="prompt", lines=1, scale=3, info="Plain text, continued"
            )
            w["jacobi_tokens"] = UncheckedSlider(
                1,
                MAX_TOKENS,
                value=8,
                step=1,
                label="n (tokens at once)",
                scale=2,
                info=f"Positions decoded in parallel (1 to {MAX_TOKENS})",
                elem_id="hood-jacobi-tokens",
            )
        w["jacobi_submit"] = w["jacobi_text"]  # Enter runs the view
        w["jacobi_guess"] = gr.Radio(
            [(label, key) for key, label in GUESSES.items()],
            value="the",
            label="starting guess",
            info="Repeated at every position before round 1",
            elem_id="hood-jacobi-guess",
        )
        run_row(w, self)
        w["jacobi_grid"] = gr.HTML(elem_id="hood-jacobi-grid")
        with gr.Row():
            w["jacobi_progress"] = gr.Plot(
                label="tokens final after each forward", elem_id="hood-jacobi-progress"
            )
            w["jacobi_time"] = gr.Plot(label="time of each forward", elem_id="hood-jacobi-time")
        gr.Markdown(NAR, elem_id="hood-jacobi-nar")

    def run(
        self, ctx: RunContext, jacobi_text: str, jacobi_tokens: float, jacobi_guess: str
    ) -> Iterator[dict[str, Any]]:
        """Greedy decoding (one token per forward), then Jacobi decoding of the same n tokens."""
        if not (jacobi_text or "").strip():  # empty text would encode as a start token alone
            raise PlaygroundError("The prompt is empty: type some text to continue.")
        prompt = encode_prompt(ctx.engine.tokenizer, jacobi_text, False)
        n, result = as_whole(jacobi_tokens, "n (tokens at once)"), None
        for result in jacobi_lesson.iter_run(ctx.engine, prompt, n, jacobi_guess or "the", ctx.control):
            yield self.views(ctx.engine, prompt, result, final=False)
        if result is not None:
            yield self.views(ctx.engine, prompt, result, final=True)

    def views(self, lm: Engine, prompt: list[int], result: JacobiResult, final: bool) -> dict[str, Any]:
        views: dict[str, Any] = status(self, result.phase, final)
        if not result.rounds:
            return views
        views["jacobi_grid"] = canvas_html(lm, prompt, result)
        views["jacobi_progress"] = plots.progress_figure([r.final for r in result.rounds], result.n)
        views["jacobi_time"] = plots.time_figure(
            [r.seconds for r in result.rounds], result.step_seconds, result.n
        )
        if final:
            views["jacobi_summary"] = summary(result)
        return views


# one grid cell (a long token is cut with an ellipsis; its title has it whole)
CELL = (
    "border:0;padding:1px 4px;border-radius:3px;white-space:pre;"
    "max-width:9em;overflow:hidden;text-overflow:ellipsis"
)


def canvas_html(lm: Engine, prompt: list[int], result: JacobiResult) -> str:
    """Every round's canvas: rows = rounds, columns = positions; final tokens green, a token this
    round changed in bold, plain greedy decoding in the last row. Round 1's text in full above."""
    first = cut_off_shown(decode_ids(lm.tokenizer, result.rounds[0].ids)).replace("\n", "↵")
    head = "".join(f"<th style='{CELL};font-weight:400;opacity:.7'>{i}</th>" for i in range(1, result.n + 1))
    rows = [_row(lm, prompt, "guess", result.guess, None, 0, "")]
    before = result.guess
    for number, r in enumerate(result.rounds, start=1):
        rows.append(_row(lm, prompt, f"round {number}", r.ids, before, r.final, f"{r.final}/{result.n}"))
        before = r.ids
    rows.append(_row(lm, prompt, "greedy", result.reference, None, result.n, "1 per forward", BLUE))
    legend = (
        f"<small>{_numbers(result)} · "
        f"<span style='background:{GREEN}'>final: equal to greedy, never changes again</span> · "
        "<b>bold</b>: changed this round · "
        f"<span style='background:{BLUE}'>plain greedy decoding</span></small>"
    )
    guess = f"<div>First parallel guess (round 1): <b>“{html.escape(first)}”</b></div>"
    table = (
        "<div style='overflow:auto;max-height:330px'><table style='border:0;border-collapse:separate;"
        "border-spacing:2px;font-family:ui-monospace,monospace;font-size:13px;line-height:1.4'>"
        f"<tr><th style='border:0'></th>{head}<th style='{CELL};font-weight:400'>final</th></tr>"
        f"{''.join(rows)}</table></div>"
    )
    return f"{guess}{table}{legend}"


def _numbers(result: JacobiResult) -> str:
    """The rounds against n and a round's time against a plain step (medians), for the grid."""
    line = f"<b>{len(result.rounds)} rounds</b> for n = {result.n}"
    if not math.isnan(result.ar_step_seconds):
        line += (
            f" · a round ({result.n + 1} tokens) {result.round_seconds * 1000:,.1f} ms vs a plain step "
            f"{result.ar_step_seconds * 1000:,.1f} ms"
        )
    return line


def _row(
    lm: Engine,
    prompt: list[int],
    name: str,
    ids: list[int],
    before: list[int] | None,
    final: int,
    note: str,
    colour: str = GREEN,
) -> str:
    cells = []
    for i, text in enumerate(token_texts(lm.tokenizer, ids, prompt)):
        style = CELL + (f";background:{colour}" if i < final else ";opacity:.8")
        if before is not None and before[i] != ids[i]:
            style += ";font-weight:700"
        title = html.escape(text.describe() or f"id {text.id}", quote=True)
        cells.append(f"<td style='{style}' title='{title}'>{html.escape(text.visible)}</td>")
    label = f"<td style='{CELL};opacity:.7'><small>{name}</small></td>"
    return f"<tr>{label}{''.join(cells)}<td style='{CELL}'><small>{note}</small></td></tr>"


def summary(result: JacobiResult) -> str:
    n, rounds = result.n, len(result.rounds)
    finals = ", ".join(str(r.final) for r in result.rounds)
    lines = [
        f"{verdict(result.identical, 'Identical to plain greedy decoding', 'DIFFERENT from greedy')}: "
        f"{len(result.ids)} tokens in **{rounds} Jacobi rounds** for n = {n} "
        f"({'as many forwards as one token at a time' if rounds >= n else f'{n - rounds} forwards fewer'}). "
        f"Final tokens after each round: {finals}.",
    ]
    if not math.isnan(result.ar_step_seconds):
        ratio = result.round_seconds / result.ar_step_seconds
        jacobi, plain = result.round_seconds * 1000, result.ar_step_seconds * 1000
        lines.append(
            f"One round ({n + 1} tokens in one forward) took **{jacobi:,.1f} ms** vs **{plain:,.1f} ms** for "
            f"one plain decode step ({ratio:,.2f}×, medians); all rounds {result.jacobi_seconds * 1000:,.0f} "
            f"ms vs {result.greedy_seconds * 1000:,.0f} ms for the {n - 1} plain steps after the "
            f"same prefill ({result.prefill_seconds * 1000:,.0f} ms)."
        )
    lines.append(
        "**Why it converges:** position i only depends on the positions before it. Round 1 gets position 1 "
        "right (its context is the prompt alone); once positions < i are right, position i is right the next "
        "round and stays so. Each round fixes at least one more token: at most n rounds. **Why it stays "
        "serial:** the right token at i needs the right tokens before it, and a guess for them is usually "
        "wrong, so the right prefix grows about one token a round: the same chain plain decoding walks, with "
        "n tokens of work per step. It gains only where guesses happen to be right (repeated text); "
        "lookahead decoding and consistency-trained models (CLLMs) build on that."
    )
    return "\n\n".join(lines)


VIEW = JacobiView()
