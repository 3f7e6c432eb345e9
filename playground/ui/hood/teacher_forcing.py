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
    TOP,
    ErrorAccumulation,
    TeacherForcing,
    check_continuation,
    iter_error_accumulation,
)
from playground.plots.hood import teacher_forcing as plots
from playground.ui.common import as_whole
from playground.ui.hood.base import BLUE, GREEN, RED, HoodEnv, LessonView, RunContext, run_row, spans, status
from playground.ui.i18n import DEFAULT, i18n, t
from playground.ui.ranges import CheckedSlider

PROMPT = "Once upon a time, there was a little boy named Tom. One day, his dad gave him a puppy. Tom was"
REFERENCE = " so happy, because he had always wanted a dog of his own."
AT, RANK, NEW_TOKENS = 1, 3, 24  # the preset: " happy" becomes the model's 3rd choice (" proud")


class TeacherForcingView(LessonView):
    key = "tf"
    lesson = LESSON
    label = "hood.tf.label"
    group = "tokens"
    run_label = "hood.tf.run"
    action = "hood.tf.action"
    explain = "hood.tf.explain"
    outputs = ("tf_forcing", "tf_kl", "tf_text")
    main = "tf_forcing"
    quick: ClassVar[dict[str, Any]] = {"tf_reference": " so happy, because he", "tf_tokens": 8}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["tf_prompt"] = gr.Textbox(
                PROMPT, label=i18n("hood.tf.prompt"), lines=2, scale=3, info=i18n("hood.tf.prompt.info")
            )
            w["tf_reference"] = gr.Textbox(
                REFERENCE,
                label=i18n("hood.tf.reference"),
                lines=2,
                scale=3,
                info=i18n("hood.tf.reference.info"),  # says MAX_TOKENS
            )
        run_row(w, self)
        w["tf_forcing"] = gr.Plot(label=i18n("hood.tf.plot.forcing"), elem_id="hood-tf-forcing")
        with gr.Row():
            w["tf_tokens"] = CheckedSlider(
                2,
                MAX_NEW_TOKENS,
                value=NEW_TOKENS,
                step=1,
                label=i18n("hood.tf.tokens"),
                info=i18n("hood.tf.tokens.info"),
                elem_id="hood-tf-tokens",
            )
            w["tf_at"] = CheckedSlider(
                0,
                MAX_NEW_TOKENS - 1,
                value=AT,
                step=1,
                label=i18n("hood.tf.at"),
                info=i18n("hood.tf.at.info"),
                elem_id="hood-tf-at",
            )
            w["tf_rank"] = CheckedSlider(
                1,
                TOP,
                value=RANK,
                step=1,
                label=i18n("hood.tf.rank"),
                info=i18n("hood.tf.rank.info"),
                elem_id="hood-tf-rank",
            )
            w["tf_token"] = gr.Textbox(
                "",
                label=i18n("hood.tf.token"),
                info=i18n("hood.tf.token.info"),
                elem_id="hood-tf-token",
            )
        w["tf_kl"] = gr.Plot(label=i18n("hood.tf.plot.kl"), elem_id="hood-tf-kl")
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
        lm, lang = ctx.engine, ctx.lang
        prompt, ids = reference_ids(lm.tokenizer, tf_prompt, tf_reference)
        new_tokens = as_whole(tf_tokens, t("hood.tf.tokens", lang))
        at = as_whole(tf_at, t("hood.tf.at", lang))
        token_id = forced_token(lm.tokenizer, tf_token)
        rank = None if token_id is not None else as_whole(tf_rank, t("hood.tf.rank", lang))
        check_continuation(lm, prompt, at, token_id, new_tokens, rank)  # before any forward
        forcing = None
        for forcing in teacher_forcing_lesson.iter_run(lm, ids, len(prompt), ctx.control):
            yield self.forcing_views(lm, forcing, lang)
        accumulation = None
        for accumulation in iter_error_accumulation(
            lm, prompt, at, token_id, new_tokens, rank=rank, control=ctx.control
        ):
            yield {**status(self, accumulation.phase, False, lang), "tf_kl": kl_view(lm, accumulation, lang)}
        if forcing is not None and accumulation is not None:
            yield self.final_views(lm, forcing, accumulation, lang)

    def forcing_views(self, lm: Engine, result: TeacherForcing, lang: str = DEFAULT) -> dict[str, Any]:
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
            lang,
        )
        return {**status(self, result.phase, False, lang), "tf_forcing": figure}

    def final_views(
        self, lm: Engine, forcing: TeacherForcing, accumulation: ErrorAccumulation, lang: str = DEFAULT
    ) -> dict[str, Any]:
        n, tokens = len(forcing.reference_ids), len(accumulation.original_ids)
        phase = t("hood.tf.phase", lang, n=n, tokens=tokens)
        return {
            **self.forcing_views(lm, forcing, lang),
            **status(self, phase, True, lang),
            "tf_kl": kl_view(lm, accumulation, lang),
            "tf_summary": summary(lm, forcing, accumulation, lang),
            "tf_text": texts(lm, forcing, accumulation, lang),
        }


def reference_ids(tokenizer: Any, prompt: str, reference: str) -> tuple[list[int], list[int]]:
    """The prompt's ids and the whole reference sequence (prompt + continuation). A space goes
    between them when the continuation starts with a letter or digit and neither has one."""
    if not (prompt or "").strip():
        raise PlaygroundError(
            "The prompt is empty: type the text both runs start from.", key="hood.tf.error.no_prompt"
        )
    if not (reference or "").strip():
        raise PlaygroundError(
            "The reference continuation is empty: type the text to score.", key="hood.tf.error.no_reference"
        )
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
            "{text!r} is {count} tokens ({pieces}): type one token, its id, or leave it blank for a rank.",
            key="hood.tf.error.not_one_token",
            text=text,
            count=len(ids),
            pieces=pieces,
        )
    return ids[0]


def kl_view(lm: Engine, result: ErrorAccumulation, lang: str = DEFAULT) -> Any:
    at, prompt = result.at, result.prompt_ids
    original = [text.visible for text in token_texts(lm.tokenizer, result.original_ids, prompt)][at:]
    perturbed = [text.visible for text in token_texts(lm.tokenizer, result.perturbed_ids, prompt)][at:]
    differs = [a != b for a, b in zip(result.original_ids[at:], result.perturbed_ids[at:], strict=False)]
    return plots.kl_figure(at, result.kl, original, perturbed, differs, lang)


def summary(lm: Engine, forcing: TeacherForcing, accumulation: ErrorAccumulation, lang: str = DEFAULT) -> str:
    n = len(forcing.reference_ids)
    parallel, serial = forcing.parallel_seconds * 1000, forcing.serial_seconds * 1000
    ratio = serial / max(parallel, 1e-9)
    lines = [
        t(
            "hood.tf.sum.times",
            lang,
            n=n,
            parallel=parallel,
            loss=forcing.mean_loss,
            serial=serial,
            ratio=ratio,
        )
    ]
    lines.append(_free_line(lm, forcing, lang))
    a = accumulation
    if a.first_difference is None:
        lines.append(t("hood.tf.sum.same", lang, at=a.at))
    else:
        later = len(a.kl) - 1
        lines.append(
            t(
                "hood.tf.sum.changed",
                lang,
                at=a.at,
                forced=_piece(lm, a.token_id),
                rank=a.forced_rank,
                p=a.forced_prob,
                own=_piece(lm, a.original_ids[a.at]),
                differing=a.differing,
                count=max(len(a.original_ids), len(a.perturbed_ids)) - a.at,
                kl=sum(a.kl[1:]) / later if later else 0.0,
            )
        )
    return "\n\n".join(lines)


def _free_line(lm: Engine, forcing: TeacherForcing, lang: str) -> str:
    """Where free running left the reference (exposure bias starts there), or that it never did."""
    leaves = forcing.leaves_at
    if leaves is None:
        return t("hood.tf.sum.followed", lang, n=len(forcing.reference_ids))
    own, ref = (_piece(lm, i) for i in (forcing.free_ids[leaves], forcing.reference_ids[leaves]))
    tokens = t("hood.tf.sum.one_token" if leaves == 1 else "hood.tf.sum.tokens", lang, count=leaves)
    return t("hood.tf.sum.left", lang, tokens=tokens, own=own, ref=ref)


def texts(lm: Engine, forcing: TeacherForcing, a: ErrorAccumulation, lang: str = DEFAULT) -> str:
    tok, prompt = lm.tokenizer, forcing.ids[: forcing.start]
    leaves = len(forcing.free_ids) if forcing.leaves_at is None else forcing.leaves_at
    free = forcing.free_ids
    at, original, perturbed = a.at, a.original_ids, a.perturbed_ids
    candidates = " · ".join(f"{rank}. {_piece(lm, i)} {p:.0%}" for rank, (i, p) in enumerate(a.candidates, 1))
    reference = spans(tok, forcing.reference_ids, BLUE, context=prompt)
    return (
        f"<p>{t('hood.tf.text.reference', lang)} {reference}</p>"
        f"<p>{t('hood.tf.text.free', lang)} {spans(tok, free[:leaves], GREEN, context=prompt)}"
        f"{spans(tok, free[leaves:], RED, context=prompt + free[:leaves])}</p>"
        f"<p>{t('hood.tf.text.own', lang)} {spans(tok, original[:at], context=a.prompt_ids)}"
        f"{spans(tok, original[at : at + 1], GREEN, context=a.prompt_ids + original[:at])}"
        f"{spans(tok, original[at + 1 :], context=a.prompt_ids + original[: at + 1])}</p>"
        f"<p>{t('hood.tf.text.changed', lang)} {spans(tok, perturbed[:at], context=a.prompt_ids)}"
        f"{spans(tok, perturbed[at : at + 1], RED, context=a.prompt_ids + perturbed[:at])}"
        f"{spans(tok, perturbed[at + 1 :], BLUE, context=a.prompt_ids + perturbed[: at + 1])}</p>"
        f"<p><small>{t('hood.tf.text.candidates', lang, at=at, candidates=candidates)}</small></p>"
    )


def _piece(lm: Engine, token_id: int) -> str:
    """A token as it reads alone, escaped for Markdown and HTML."""
    return html.escape(token_texts(lm.tokenizer, [token_id])[0].visible)


VIEW = TeacherForcingView()
