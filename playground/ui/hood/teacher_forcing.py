"""The view of the lesson "Training reads in parallel, generation writes in series"
(playground/hood/teacher_forcing.py)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any, ClassVar

import gradio as gr

from playground.engine.base import Engine
from playground.engine.prompts import encode_continuation, encode_text
from playground.engine.tokens import token_texts
from playground.errors import PlaygroundError
from playground.hood import teacher_forcing as teacher_forcing_lesson
from playground.hood.teacher_forcing import (
    LESSON,
    MAX_NEW_TOKENS,
    MAX_TOKENS,
    TOP,
    ErrorAccumulation,
    TeacherForcing,
    check_continuation,
    iter_error_accumulation,
)
from playground.plots.hood import teacher_forcing as plots
from playground.ui.common import as_whole
from playground.ui.hood.base import BLUE, GREEN, RED, HoodEnv, LessonView, RunContext, run_row, spans, status
from playground.ui.ranges import CheckedSlider

PROMPT = "Once upon a time, there was a little boy named Tom. One day, his dad gave him a puppy. Tom was"
REFERENCE = " so happy, because he had always wanted a dog of his own."
AT, RANK, NEW_TOKENS = 1, 3, 24  # the preset: " happy" becomes the model's 3rd choice (" proud")


class TeacherForcingView(LessonView):
    key = "tf"
    lesson = LESSON
    label = "Teacher forcing"
    group = "tokens"
    run_label = "Run: score in parallel, write in series"
    explain = (
        "**Training reads in parallel**: one forward scores every token of a reference text, each position "
        "seeing the true text before it (*teacher forcing*). **Generation writes in series**: one forward "
        "per token, each reading the model's own tokens back, so one wrong word is never taken back and "
        "everything after it follows from it."
    )
    outputs = ("tf_forcing", "tf_kl", "tf_text")
    main = "tf_forcing"
    quick: ClassVar[dict[str, Any]] = {"tf_reference": " so happy, because he", "tf_tokens": 8}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["tf_prompt"] = gr.Textbox(
                PROMPT, label="prompt", lines=2, scale=3, info="What both runs start from"
            )
            w["tf_reference"] = gr.Textbox(
                REFERENCE,
                label="reference continuation",
                lines=2,
                scale=3,
                info=f"Scored teacher forced; at most {MAX_TOKENS} tokens with the prompt",
            )
        run_row(w, self)
        w["tf_forcing"] = gr.Plot(
            label="each reference token's loss, teacher forced (below), and the model's own tokens (above)",
            elem_id="hood-tf-forcing",
        )
        with gr.Row():
            w["tf_tokens"] = CheckedSlider(
                2,
                MAX_NEW_TOKENS,
                value=NEW_TOKENS,
                step=1,
                label="new tokens",
                info="Greedy tokens in each continuation",
                elem_id="hood-tf-tokens",
            )
            w["tf_at"] = CheckedSlider(
                0,
                MAX_NEW_TOKENS - 1,
                value=AT,
                step=1,
                label="change position",
                info="The answer token to replace (0 = the first)",
                elem_id="hood-tf-at",
            )
            w["tf_rank"] = CheckedSlider(
                1,
                TOP,
                value=RANK,
                step=1,
                label="with the model's choice no.",
                info="1 = its own choice: nothing changes",
                elem_id="hood-tf-rank",
            )
            w["tf_token"] = gr.Textbox(
                "",
                label="or this token",
                info="A token id or one token's text (blank: use the rank)",
                elem_id="hood-tf-token",
            )
        w["tf_kl"] = gr.Plot(label="one word changed: KL between the two runs per step", elem_id="hood-tf-kl")
        w["tf_text"] = gr.HTML(elem_id="hood-tf-text")

    def run(
        self,
        ctx: RunContext,
        tf_prompt: str,
        tf_reference: str,
        tf_tokens: float,
        tf_at: float,
        tf_rank: float,
        tf_token: str,
    ) -> Iterator[dict[str, Any]]:
        """Score the reference teacher forced (one forward) and write as many tokens free running (one
        forward each); then continue the prompt twice, once with one token changed."""
        lm = ctx.engine
        prompt, ids = reference_ids(lm.tokenizer, tf_prompt, tf_reference)
        new_tokens, at = as_whole(tf_tokens, "new tokens"), as_whole(tf_at, "change position")
        token_id = forced_token(lm.tokenizer, tf_token)
        rank = None if token_id is not None else as_whole(tf_rank, "rank")
        check_continuation(lm, prompt, at, token_id, new_tokens, rank)  # before any forward
        forcing = None
        for forcing in teacher_forcing_lesson.iter_run(lm, ids, len(prompt), ctx.control):
            yield self.forcing_views(lm, forcing)
        accumulation = None
        for accumulation in iter_error_accumulation(
            lm, prompt, at, token_id, new_tokens, rank=rank, control=ctx.control
        ):
            yield {**status(self, accumulation.phase, False), "tf_kl": kl_view(lm, accumulation)}
        if forcing is not None and accumulation is not None:
            yield self.final_views(lm, forcing, accumulation)

    def forcing_views(self, lm: Engine, result: TeacherForcing) -> dict[str, Any]:
        prompt = result.ids[: result.start]
        reference = [t.visible for t in token_texts(lm.tokenizer, result.reference_ids, prompt)]
        free = [t.visible for t in token_texts(lm.tokenizer, result.free_ids, prompt)]
        follows = [a == b for a, b in zip(result.free_ids, result.reference_ids, strict=False)]
        figure = plots.forcing_figure(
            reference,
            result.losses,
            result.ranks,
            free,
            follows,
            result.leaves_at,
            result.parallel_seconds,
            result.serial_step_seconds,
        )
        return {**status(self, result.phase, False), "tf_forcing": figure}

    def final_views(
        self, lm: Engine, forcing: TeacherForcing, accumulation: ErrorAccumulation
    ) -> dict[str, Any]:
        n = len(forcing.reference_ids)
        phase = f"1 forward vs {n} · two runs of {len(accumulation.original_ids)} tokens"
        return {
            **self.forcing_views(lm, forcing),
            **status(self, phase, True),
            "tf_kl": kl_view(lm, accumulation),
            "tf_summary": summary(lm, forcing, accumulation),
            "tf_text": texts(lm, forcing, accumulation),
        }


def reference_ids(tokenizer: Any, prompt: str, reference: str) -> tuple[list[int], list[int]]:
    """The prompt's ids and the whole reference sequence (prompt + continuation). A space goes
    between them when the continuation starts with a letter or digit and neither has one."""
    if not (prompt or "").strip():
        raise PlaygroundError("The prompt is empty: type the text both runs start from.")
    if not (reference or "").strip():
        raise PlaygroundError("The reference continuation is empty: type the text to score.")
    if reference[0].isalnum() and not prompt[-1].isspace():
        reference = " " + reference
    ids = encode_text(tokenizer, prompt)
    return ids, ids + encode_continuation(tokenizer, reference)


def forced_token(tokenizer: Any, text: str | None) -> int | None:
    """The typed forced token: None (blank: use the rank), a token id, or one token's text."""
    if text is None or not text.strip():
        return None
    if re.fullmatch(r"-?\d+", text.strip()):
        return int(text.strip())
    ids = encode_continuation(tokenizer, text)
    if len(ids) != 1:
        pieces = " | ".join(t.visible for t in token_texts(tokenizer, ids))
        raise PlaygroundError(
            f"{text!r} is {len(ids)} tokens ({pieces}): type one token, its id, or leave it blank for a rank."
        )
    return ids[0]


def kl_view(lm: Engine, result: ErrorAccumulation) -> Any:
    at, prompt = result.at, result.prompt_ids
    original = [t.visible for t in token_texts(lm.tokenizer, result.original_ids, prompt)][at:]
    perturbed = [t.visible for t in token_texts(lm.tokenizer, result.perturbed_ids, prompt)][at:]
    differs = [a != b for a, b in zip(result.original_ids[at:], result.perturbed_ids[at:], strict=False)]
    return plots.kl_figure(at, result.kl, original, perturbed, differs)


def summary(lm: Engine, forcing: TeacherForcing, accumulation: ErrorAccumulation) -> str:
    n = len(forcing.reference_ids)
    parallel, serial = forcing.parallel_seconds * 1000, forcing.serial_seconds * 1000
    lines = [
        f"**Training** scored all {n} reference tokens in **1 forward** ({parallel:,.0f} ms; mean loss "
        f"{forcing.mean_loss:.2f} nats per token). **Generating** {n} tokens took **{n} forwards** "
        f"({serial:,.0f} ms, {serial / max(parallel, 1e-9):,.1f}× as long): each needs the one before it."
    ]
    leaves = forcing.leaves_at
    if leaves is None:
        lines.append(f"Free running wrote the reference itself, all {n} tokens.")
    else:
        own, ref = (_piece(lm, t) for t in (forcing.free_ids[leaves], forcing.reference_ids[leaves]))
        lines.append(
            f"Free running followed the reference for {leaves} token{'s' * (leaves != 1)}, then wrote {own} "
            f"where it has {ref}: from there on the model reads its own text, which training never showed it."
        )
    a = accumulation
    if a.first_difference is None:
        lines.append(
            f"The forced token at position {a.at} is the model's own choice: both runs are the same."
        )
    else:
        later = len(a.kl) - 1
        mean_kl = sum(a.kl[1:]) / later if later else 0.0
        lines.append(
            f"**One word changed** at position {a.at}: {_piece(lm, a.token_id)} (the model's no. "
            f"{a.forced_rank}, p = {a.forced_prob:.2f}) instead of {_piece(lm, a.original_ids[a.at])}. "
            f"{a.differing} of {max(len(a.original_ids), len(a.perturbed_ids)) - a.at} tokens from there "
            f"on differ; mean KL {mean_kl:.2f} nats per later step. Nothing takes the word back."
        )
    return "\n\n".join(lines)


def texts(lm: Engine, forcing: TeacherForcing, a: ErrorAccumulation) -> str:
    tok, prompt = lm.tokenizer, forcing.ids[: forcing.start]
    leaves = len(forcing.free_ids) if forcing.leaves_at is None else forcing.leaves_at
    free = forcing.free_ids
    at, original, perturbed = a.at, a.original_ids, a.perturbed_ids
    candidates = " · ".join(f"{rank}. {_piece(lm, i)} {p:.0%}" for rank, (i, p) in enumerate(a.candidates, 1))
    return (
        f"<p><b>Reference</b> (teacher forced): {spans(tok, forcing.reference_ids, BLUE, context=prompt)}</p>"
        f"<p><b>Free running</b>: {spans(tok, free[:leaves], GREEN, context=prompt)}"
        f"{spans(tok, free[leaves:], RED, context=prompt + free[:leaves])}</p>"
        f"<p><b>The model's own</b>: {spans(tok, original[:at], context=a.prompt_ids)}"
        f"{spans(tok, original[at : at + 1], GREEN, context=a.prompt_ids + original[:at])}"
        f"{spans(tok, original[at + 1 :], context=a.prompt_ids + original[: at + 1])}</p>"
        f"<p><b>One word changed</b>: {spans(tok, perturbed[:at], context=a.prompt_ids)}"
        f"{spans(tok, perturbed[at : at + 1], RED, context=a.prompt_ids + perturbed[:at])}"
        f"{spans(tok, perturbed[at + 1 :], BLUE, context=a.prompt_ids + perturbed[: at + 1])}</p>"
        f"<p><small>The model's top choices at position {at}: {candidates}</small></p>"
    )


def _piece(lm: Engine, token_id: int) -> str:
    """A token as it reads alone, escaped for Markdown and HTML."""
    return html.escape(token_texts(lm.tokenizer, [token_id])[0].visible)


VIEW = TeacherForcingView()
