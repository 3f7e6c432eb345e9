"""The view of the lesson "Logit lens" (playground/hood/lens.py)."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any, ClassVar

import gradio as gr

from playground.engine.base import Engine
from playground.engine.prompts import encode_prompt
from playground.engine.tokens import decode_ids
from playground.errors import PlaygroundError
from playground.hood import lens as lens_lesson
from playground.hood.lens import LESSON
from playground.hood.lens import LensView as Lens
from playground.plots.hood import lens as plots
from playground.ui.common import Widgets, as_whole, connect
from playground.ui.hood.base import (
    HoodEnv,
    LessonView,
    RunContext,
    TabServices,
    run_row,
    status_line,
    token_ids,
)
from playground.ui.hood.tab import open_at
from playground.ui.i18n import DEFAULT, i18n, t

TEXT = "The capital of France is"
OUTPUTS = ["lens_status", "lens_summary", "lens_tracks", "lens_top", "lens_candidates", "lens_ids"]
FROM_STEP_OUTPUTS = [*OUTPUTS, "lens_text", "hood_views", "hood_group_inside"]  # the Step tab's "Logit lens"


class LensView(LessonView):
    key = "lens"
    lesson = LESSON
    label = "hood.lens.label"
    group = "inside"
    run_label = "hood.lens.run"
    action = "hood.lens.action"
    explain = "hood.lens.explain"
    outputs = ("lens_tracks", "lens_top", "lens_candidates", "lens_ids")
    main = "lens_tracks"
    quick: ClassVar[dict[str, Any]] = {"lens_text": TEXT}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["lens_text"] = gr.Textbox(
                TEXT, label=i18n("hood.lens.text"), lines=2, scale=4, info=i18n("hood.lens.text.info")
            )
            w["lens_chat"] = gr.Checkbox(
                False, label=i18n("hood.lens.chat"), info=i18n("hood.lens.chat.info")
            )
        w["lens_submit"] = w["lens_text"]  # Enter runs the view
        run_row(w, self)
        w["lens_candidates"] = gr.Dropdown(
            [],
            value=[],
            multiselect=True,
            label=i18n("hood.lens.candidates"),
            info=i18n("hood.lens.candidates.info"),
        )
        w["lens_tracks"] = gr.Plot(label=i18n("hood.lens.plot.tracks"), elem_id="hood-lens-tracks")
        w["lens_top"] = gr.Plot(label=i18n("hood.lens.plot.top"), elem_id="hood-lens-top")
        w["lens_pick"] = gr.Textbox(visible="hidden", elem_id="hood-lens-pick", label="clicked token")
        w["lens_ids"] = gr.State([])

    def run(
        self, ctx: RunContext, lens_text: str, lens_chat: bool, lens_candidates: list[Any]
    ) -> Iterator[dict[str, Any]]:
        """The logit lens for the token after the text (chat: wrapped as a user turn, answer next)."""
        ids = encode_prompt(ctx.engine.tokenizer, lens_text or "", bool(lens_chat))
        view = lens_lesson.run(ctx.engine, ids, token_ids(lens_candidates, ctx.lang), ctx.control)
        yield views(ctx.engine, view, ctx.lang)

    def candidates(
        self, tab: TabServices, ids: list[int], candidates: list[Any], request: Any = None
    ) -> dict[str, Any]:
        """Track the chosen candidate tokens too (the prefix of the last run)."""
        if not ids:
            raise PlaygroundError("Run the lens first: there is no prefix yet.", key="hood.lens.error.no_run")
        ctx = tab.context(request, self.key)
        view = lens_lesson.run(ctx.engine, ids, token_ids(candidates, ctx.lang), ctx.control)
        return tab.remember(request, self.key, views(ctx.engine, view, ctx.lang))

    def pick(
        self, tab: TabServices, pick: str, ids: list[int], candidates: list[Any], request: Any = None
    ) -> dict[str, Any]:
        """A click on a token of the top-tokens chart ("id:stamp") adds it to the tracked tokens."""
        lang = tab.context(request, self.key).lang
        token = as_whole(str(pick).split(":")[0], t("hood.token_id", lang))
        return self.candidates(tab, ids, [*token_ids(candidates, lang), token], request)

    def wire(self, w: Widgets, tab: TabServices) -> None:
        def hood_lens_candidates(
            lens_ids: list[int], lens_candidates: list[Any], request: gr.Request = None
        ) -> dict[str, Any]:
            """Track the chosen candidate tokens too (the prefix of the last run)."""
            return self.candidates(tab, lens_ids, lens_candidates, request)

        def hood_lens_pick(
            lens_pick: str, lens_ids: list[int], lens_candidates: list[Any], request: gr.Request = None
        ) -> dict[str, Any]:
            return self.pick(tab, lens_pick, lens_ids, lens_candidates, request)

        on = {"status": "lens_status", "trigger_mode": "always_last"}
        connect(
            w["lens_candidates"].input,
            hood_lens_candidates,
            w,
            OUTPUTS,
            api_name="hood_lens_candidates",
            **on,
        )
        connect(w["lens_pick"].change, hood_lens_pick, w, OUTPUTS, api_name=None, **on)

    def at_step(self, tab: TabServices, request: gr.Request | None) -> dict[str, Any]:
        """The logit lens at the Step tab's current step (its prompt and the tokens picked so far)."""
        ctx = tab.context(request, self.key)
        session = ctx.workspace.step
        if session is None:
            raise PlaygroundError(
                "No step-by-step session yet: start one in the Step by step tab.",
                key="hood.lens.error.no_step",
            )
        with session.locked():
            ids = list(session.ids)
        shown = views(ctx.engine, lens_lesson.run(ctx.engine, ids, control=ctx.control), ctx.lang)
        shown["lens_status"] = t("hood.lens.from_step", ctx.lang, status=shown["lens_status"])
        tab.remember(request, self.key, shown, fresh=True)
        text = decode_ids(ctx.engine.tokenizer, ids)
        return {**shown, "lens_text": text, **open_at(self)}


def views(lm: Engine, view: Lens, lang: str = DEFAULT) -> dict[str, Any]:
    chosen_label = t("hood.lens.chosen", lang, token=view.chosen.visible)
    tracks = [
        (chosen_label if track is view.chosen else track.visible, track.probs, track.ranks)
        for track in (view.chosen, *view.candidates)
    ]
    choices = {token_id: piece for row in view.top for token_id, piece, _ in row}
    for track in view.candidates:
        choices[track.id] = track.visible
    chosen = view.chosen
    layers = len(chosen.ranks)
    summary = t(
        "hood.lens.summary",
        lang,
        token=html.escape(chosen.visible),
        p=chosen.probs[-1],
        settles=view.settles_at,
        layers=layers,
        rank=chosen.ranks[0],
        first=chosen.probs[0],
    )
    return {
        "lens_status": status_line(
            t("hood.lens.phase", lang, tokens=len(view.ids), layers=layers), True, lang
        ),
        "lens_summary": summary,
        "lens_tracks": plots.lens_track_figure(tracks, view.settles_at, lang),
        "lens_top": plots.lens_top_figure(view.top, lang),
        "lens_candidates": gr.update(
            choices=[(f"{piece} · #{i}", i) for i, piece in choices.items() if i != chosen.id],
            value=[t.id for t in view.candidates],
        ),
        "lens_ids": view.ids,
    }


VIEW = LensView()
