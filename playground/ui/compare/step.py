"""Compare > Step by step: one prefix text read by both models, their most likely next tokens side by
side (each model's probability, log-prob and, after that side's sampling settings, the probability
of being drawn): a StepSession of each engine, as the Step by step tab has."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground.engine.base import Engine
from playground.errors import Cancelled, PlaygroundError
from playground.step import StepSession
from playground.step.records import Candidate
from playground.ui.common import as_whole
from playground.ui.compare.sides import SIDES, SideChoice, SideEngines, side_columns
from playground.ui.i18n import i18n, localize, t
from playground.ui.ranges import CheckedNumber
from playground.ui.step_render import DEFAULT_PROMPT

CANDIDATES = 10
MOST_CANDIDATES = 40
TABLE_HEADERS = [
    "compare.step.col.rank",
    "compare.step.col.token",
    "compare.step.col.id",
    "compare.step.col.probability",
    "compare.step.col.logprob",
    "compare.step.col.sampled",
]
OUTPUTS = [f"step_{x}{part}" for x in SIDES for part in ("_title", "_table", "_summary")]


def headers(lang: str) -> list[str]:
    return [t(key, lang) for key in TABLE_HEADERS]


def layout(w: dict[str, Any]) -> None:
    with gr.Row():
        w["step_prefix"] = gr.Textbox(
            DEFAULT_PROMPT, label=i18n("compare.step.prefix"), lines=2, scale=4, elem_id="compare-step-prefix"
        )
        with gr.Column(scale=1, min_width=180):
            w["step_chat"] = gr.Checkbox(
                False, label=i18n("compare.step.chat"), info=i18n("compare.step.chat.info")
            )
            w["step_k"] = CheckedNumber(
                CANDIDATES, label=i18n("compare.step.k"), precision=0, minimum=1, maximum=MOST_CANDIDATES
            )
    w["step_run"] = gr.Button(i18n("compare.step.run"), variant="primary", elem_id="compare-step-run")
    side_columns(w, _column)


def _column(x: str) -> dict[str, Any]:
    return {
        f"step_{x}_title": gr.Markdown(""),
        f"step_{x}_table": gr.Dataframe(
            headers=headers("en"), interactive=False, elem_id=f"compare-step-{x}-table"
        ),
        f"step_{x}_summary": gr.Markdown("", elem_id=f"compare-step-{x}-summary"),
    }


def check_k(k: Any) -> int:
    """How many candidates to list: a whole number from 1 to MOST_CANDIDATES."""
    n = as_whole(k, "candidates")
    if not 1 <= n <= MOST_CANDIDATES:
        raise PlaygroundError(
            "Candidates must be 1 to {most}, got {n}.",
            key="compare.error.candidates",
            most=MOST_CANDIDATES,
            n=n,
        )
    return n


def run(engines: SideEngines, prefix: str, chat: bool, k: int) -> Iterator[dict[str, Any]]:
    """Load both sides, then each model's top k next tokens after the prefix."""
    yield from engines.load()
    for index, choice in enumerate(engines.choices):
        letter, engine = choice.letter, engines.engines[index]
        title = {f"step_{letter}_title": f"**{choice.describe(engines.lang)}**"}
        if engine is None:
            yield {**title, f"step_{letter}_table": [], f"step_{letter}_summary": engines.errors[index]}
            continue
        try:
            views = _candidates(engine, choice, prefix, chat, k, engines.lang)
        except Cancelled:
            raise
        except PlaygroundError as exc:  # this side alone fails (a server gone): the other still shows
            views = {
                f"step_{letter}_table": [],
                f"step_{letter}_summary": localize(exc.message, engines.lang),
            }
        yield {**title, **views}


def _candidates(
    engine: Engine, choice: SideChoice, prefix: str, chat: bool, k: int, lang: str
) -> dict[str, Any]:
    """One side's table of candidates and its summary line."""
    session = StepSession(engine, prefix, chat, settings=choice.settings)
    try:
        candidates = session.candidates(k)
        prompt_tokens = len(session.prompt_ids)
    finally:
        session.release()
    top = candidates[0]
    summary = t(
        "compare.step.summary",
        lang,
        tokens=prompt_tokens,
        top=top.piece.visible,
        prob=top.prob,
        model=choice.key,
    )
    letter = choice.letter
    return {f"step_{letter}_table": candidate_rows(candidates), f"step_{letter}_summary": summary}


def candidate_rows(candidates: list[Candidate]) -> list[list[Any]]:
    """rank, token, id, probability, log-prob, probability after the side's sampling settings."""
    return [
        [c.rank, c.piece.visible, c.token_id, round(c.prob, 4), round(c.logprob, 3), round(c.sampled_prob, 4)]
        for c in candidates
    ]


def link_values(prefix: str, chat: bool) -> dict[str, Any]:
    return {"step_prefix": prefix, "step_chat": chat}
