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
from playground.ui.hood.base import HoodEnv, LessonView, RunContext, TabServices, run_row, token_ids
from playground.ui.hood.tab import open_at

TEXT = "The capital of France is"
OUTPUTS = ["lens_status", "lens_summary", "lens_tracks", "lens_top", "lens_candidates", "lens_ids"]
FROM_STEP_OUTPUTS = [*OUTPUTS, "lens_text", "hood_views", "hood_group_inside"]  # the Step tab's "Logit lens"


class LensView(LessonView):
    key = "lens"
    lesson = LESSON
    label = "Logit lens"
    group = "inside"
    run_label = "Run: logit lens"
    explain = (
        "The **logit lens** asks what the model would say if it stopped after layer *i*: the final norm and "
        "the LM head applied to that layer's hidden state. Watch where the answer appears and where it "
        "settles. Click a token in the chart, or pick candidates, to follow them."
    )
    outputs = ("lens_tracks", "lens_top", "lens_candidates", "lens_ids")
    main = "lens_tracks"
    quick: ClassVar[dict[str, Any]] = {"lens_text": TEXT}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        with gr.Row():
            w["lens_text"] = gr.Textbox(
                TEXT, label="prefix", lines=2, scale=4, info="The lens looks at the next token"
            )
            w["lens_chat"] = gr.Checkbox(
                False, label="chat", info="Wrap as a user turn: the answer's first token is next"
            )
        w["lens_submit"] = w["lens_text"]  # Enter runs the view
        run_row(w, self)
        w["lens_candidates"] = gr.Dropdown(
            [], value=[], multiselect=True, label="also track", info="Tokens to follow layer by layer"
        )
        w["lens_tracks"] = gr.Plot(
            label="probability and rank of each tracked token after every layer", elem_id="hood-lens-tracks"
        )
        w["lens_top"] = gr.Plot(
            label="each layer's most likely next tokens (click one to track it)", elem_id="hood-lens-top"
        )
        w["lens_pick"] = gr.Textbox(visible="hidden", elem_id="hood-lens-pick", label="clicked token")
        w["lens_ids"] = gr.State([])

    def run(
        self, ctx: RunContext, lens_text: str, lens_chat: bool, lens_candidates: list[Any]
    ) -> Iterator[dict[str, Any]]:
        """The logit lens for the token after the text (chat: wrapped as a user turn, answer next)."""
        ids = encode_prompt(ctx.engine.tokenizer, lens_text or "", bool(lens_chat))
        view = lens_lesson.run(ctx.engine, ids, token_ids(lens_candidates), ctx.control)
        yield views(ctx.engine, view)

    def candidates(
        self, tab: TabServices, ids: list[int], candidates: list[Any], request: Any = None
    ) -> dict[str, Any]:
        """Track the chosen candidate tokens too (the prefix of the last run)."""
        if not ids:
            raise PlaygroundError("Run the lens first: there is no prefix yet.")
        ctx = tab.context(request, self.key)
        view = lens_lesson.run(ctx.engine, ids, token_ids(candidates), ctx.control)
        return tab.remember(request, self.key, views(ctx.engine, view))

    def pick(
        self, tab: TabServices, pick: str, ids: list[int], candidates: list[Any], request: Any = None
    ) -> dict[str, Any]:
        """A click on a token of the top-tokens chart ("id:stamp") adds it to the tracked tokens."""
        token = as_whole(str(pick).split(":")[0], "token id")
        return self.candidates(tab, ids, [*token_ids(candidates), token], request)

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
            raise PlaygroundError("No step-by-step session yet: start one in the Step by step tab.")
        with session.locked():
            ids = list(session.ids)
        shown = views(ctx.engine, lens_lesson.run(ctx.engine, ids, control=ctx.control))
        shown["lens_status"] = f"From the Step tab: {shown['lens_status']}"
        tab.remember(request, self.key, shown, fresh=True)
        text = decode_ids(ctx.engine.tokenizer, ids)
        return {**shown, "lens_text": text, **open_at(self)}


def views(lm: Engine, view: Lens) -> dict[str, Any]:
    tracks = [
        (f"{t.visible} (chosen)" if t is view.chosen else t.visible, t.probs, t.ranks)
        for t in (view.chosen, *view.candidates)
    ]
    choices = {token_id: piece for row in view.top for token_id, piece, _ in row}
    for t in view.candidates:
        choices[t.id] = t.visible
    chosen = view.chosen
    layers = len(chosen.ranks)
    summary = (
        f"Next token: **{html.escape(chosen.visible)}** (p = {chosen.probs[-1]:.3f} after the last layer). "
        f"It is the top token from layer **{view.settles_at}** of {layers} on (where the decision settles); "
        f"after layer 1 it ranks #{chosen.ranks[0]:,} with p = {chosen.probs[0]:.2g}. Each row applies the "
        "final norm and the LM head to that layer's hidden state; the last row is the model's own output."
    )
    return {
        "lens_status": f"Done: {len(view.ids)} tokens · {layers} layers",
        "lens_summary": summary,
        "lens_tracks": plots.lens_track_figure(tracks, view.settles_at),
        "lens_top": plots.lens_top_figure(view.top),
        "lens_candidates": gr.update(
            choices=[(f"{piece} · #{i}", i) for i, piece in choices.items() if i != chosen.id],
            value=[t.id for t in view.candidates],
        ),
        "lens_ids": view.ids,
    }


VIEW = LensView()
