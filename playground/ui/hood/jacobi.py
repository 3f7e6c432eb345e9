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
from playground.ui.i18n import DEFAULT, i18n, t

TEXT = "The capital of France is"
GUESS_LABELS = {  # the starting guesses (playground/hood/jacobi.py GUESSES) -> their labels' keys
    "the": "hood.jacobi.guess.the",
    "last": "hood.jacobi.guess.last",
    "first": "hood.jacobi.guess.first",
}


class JacobiView(LessonView):
    key = "jacobi"
    lesson = LESSON
    label = "hood.jacobi.label"
    group = "faster"
    run_label = "hood.jacobi.run"
    action = "hood.jacobi.action"
    explain = "hood.jacobi.explain"
    outputs = ("jacobi_grid", "jacobi_progress", "jacobi_time")
    main = "jacobi_grid"
    quick: ClassVar[dict[str, Any]] = {"jacobi_tokens": 5}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["jacobi_text"] = gr.Textbox(
                TEXT, label=i18n("hood.jacobi.text"), lines=1, scale=3, info=i18n("hood.jacobi.text.info")
            )
            w["jacobi_tokens"] = UncheckedSlider(
                1,
                MAX_TOKENS,
                value=8,
                step=1,
                label=i18n("hood.jacobi.n"),
                scale=2,
                info=i18n("hood.jacobi.n.info"),  # says MAX_TOKENS
                elem_id="hood-jacobi-tokens",
            )
        w["jacobi_submit"] = w["jacobi_text"]  # Enter runs the view
        w["jacobi_guess"] = gr.Radio(
            [(i18n(GUESS_LABELS[key]), key) for key in GUESSES],
            value="the",
            label=i18n("hood.jacobi.guess"),
            info=i18n("hood.jacobi.guess.info"),
            elem_id="hood-jacobi-guess",
        )
        run_row(w, self)
        w["jacobi_grid"] = gr.HTML(elem_id="hood-jacobi-grid")
        with gr.Row():
            w["jacobi_progress"] = gr.Plot(
                label=i18n("hood.jacobi.plot.progress"), elem_id="hood-jacobi-progress"
            )
            w["jacobi_time"] = gr.Plot(label=i18n("hood.jacobi.plot.time"), elem_id="hood-jacobi-time")
        gr.Markdown(i18n("hood.jacobi.nar"), elem_id="hood-jacobi-nar")

    def run(
        self, ctx: RunContext, jacobi_text: str, jacobi_tokens: float, jacobi_guess: str
    ) -> Iterator[dict[str, Any]]:
        """Greedy decoding (one token per forward), then Jacobi decoding of the same n tokens."""
        if not (jacobi_text or "").strip():  # empty text would encode as a start token alone
            raise PlaygroundError(
                "The prompt is empty: type some text to continue.", key="hood.error.empty_prompt"
            )
        lang = ctx.lang
        prompt = encode_prompt(ctx.engine.tokenizer, jacobi_text, False)
        n, result = as_whole(jacobi_tokens, t("hood.jacobi.n", lang)), None
        for result in jacobi_lesson.iter_run(ctx.engine, prompt, n, jacobi_guess or "the", ctx.control):
            yield self.views(ctx.engine, prompt, result, final=False, lang=lang)
        if result is not None:
            yield self.views(ctx.engine, prompt, result, final=True, lang=lang)

    def views(
        self, lm: Engine, prompt: list[int], result: JacobiResult, final: bool, lang: str = DEFAULT
    ) -> dict[str, Any]:
        views: dict[str, Any] = status(self, result.phase, final, lang)
        if not result.rounds:
            return views
        views["jacobi_grid"] = canvas_html(lm, prompt, result, lang)
        views["jacobi_progress"] = plots.progress_figure([r.final for r in result.rounds], result.n, lang)
        views["jacobi_time"] = plots.time_figure(
            [r.seconds for r in result.rounds], result.step_seconds, result.n, lang
        )
        if final:
            views["jacobi_summary"] = summary(result, lang)
        return views


# one grid cell (a long token is cut with an ellipsis; its title has it whole)
CELL = (
    "border:0;padding:1px 4px;border-radius:3px;white-space:pre;"
    "max-width:9em;overflow:hidden;text-overflow:ellipsis"
)


def canvas_html(lm: Engine, prompt: list[int], result: JacobiResult, lang: str = DEFAULT) -> str:
    """Every round's canvas: rows = rounds, columns = positions; final tokens green, a token this
    round changed in bold, plain greedy decoding in the last row. Round 1's text in full above."""
    first = cut_off_shown(decode_ids(lm.tokenizer, result.rounds[0].ids)).replace("\n", "↵")
    head = "".join(f"<th style='{CELL};font-weight:400;opacity:.7'>{i}</th>" for i in range(1, result.n + 1))
    rows = [_row(lm, prompt, t("hood.jacobi.grid.guess", lang), result.guess, None, 0, "")]
    before = result.guess
    for number, r in enumerate(result.rounds, start=1):
        name = t("hood.jacobi.grid.round", lang, round=number)
        rows.append(_row(lm, prompt, name, r.ids, before, r.final, f"{r.final}/{result.n}"))
        before = r.ids
    greedy, per_forward = t("hood.jacobi.grid.greedy", lang), t("hood.jacobi.grid.per_forward", lang)
    rows.append(_row(lm, prompt, greedy, result.reference, None, result.n, per_forward, BLUE))
    legend = (
        f"<small>{_numbers(result, lang)} · "
        f"<span style='background:{GREEN}'>{t('hood.jacobi.grid.final_note', lang)}</span> · "
        f"{t('hood.jacobi.grid.bold', lang)} · "
        f"<span style='background:{BLUE}'>{t('hood.jacobi.grid.plain', lang)}</span></small>"
    )
    guess = f"<div>{t('hood.jacobi.grid.first', lang, text=html.escape(first))}</div>"
    table = (
        "<div style='overflow:auto;max-height:330px'><table style='border:0;border-collapse:separate;"
        "border-spacing:2px;font-family:ui-monospace,monospace;font-size:13px;line-height:1.4'>"
        f"<tr><th style='border:0'></th>{head}<th style='{CELL};font-weight:400'>"
        f"{t('hood.jacobi.grid.final', lang)}</th></tr>{''.join(rows)}</table></div>"
    )
    return f"{guess}{table}{legend}"


def _numbers(result: JacobiResult, lang: str) -> str:
    """The rounds against n and a round's time against a plain step (medians), for the grid."""
    line = t("hood.jacobi.grid.rounds", lang, rounds=len(result.rounds), n=result.n)
    if not math.isnan(result.ar_step_seconds):
        line += t(
            "hood.jacobi.grid.times",
            lang,
            tokens=result.n + 1,
            round=result.round_seconds * 1000,
            step=result.ar_step_seconds * 1000,
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


def summary(result: JacobiResult, lang: str = DEFAULT) -> str:
    n, rounds = result.n, len(result.rounds)
    same = verdict(result.identical, "hood.jacobi.sum.identical", "hood.jacobi.sum.different", lang)
    saved = (
        t("hood.jacobi.sum.as_many", lang)
        if rounds >= n
        else t("hood.jacobi.sum.fewer", lang, fewer=n - rounds)
    )
    finals = ", ".join(str(r.final) for r in result.rounds)
    lines = [
        t(
            "hood.jacobi.sum.rounds",
            lang,
            verdict=same,
            tokens=len(result.ids),
            rounds=rounds,
            n=n,
            saved=saved,
        )
        + t("hood.jacobi.sum.finals", lang, finals=finals)
    ]
    if not math.isnan(result.ar_step_seconds):
        lines.append(
            t(
                "hood.jacobi.sum.times",
                lang,
                tokens=n + 1,
                jacobi=result.round_seconds * 1000,
                plain=result.ar_step_seconds * 1000,
                ratio=result.round_seconds / result.ar_step_seconds,
                all_rounds=result.jacobi_seconds * 1000,
                greedy=result.greedy_seconds * 1000,
                steps=n - 1,
                prefill=result.prefill_seconds * 1000,
            )
        )
    lines.append(t("hood.jacobi.sum.why", lang))
    return "\n\n".join(lines)


VIEW = JacobiView()
