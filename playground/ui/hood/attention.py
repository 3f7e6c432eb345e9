"""The view of the lesson "Attention and the causal mask" (playground/hood/attention.py)."""

from __future__ import annotations

import html
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, ClassVar

import gradio as gr

from playground.engine.prompts import encode_text
from playground.errors import PlaygroundError
from playground.hood import attention as attention_lesson
from playground.hood.attention import LESSON
from playground.hood.attention import AttentionView as AttentionMaps
from playground.messages import Message
from playground.plots.hood import attention as plots
from playground.ui.common import UncheckedSlider, Widgets, as_whole, connect
from playground.ui.hood.base import HoodEnv, LessonView, RunContext, TabServices, run_row, status_line
from playground.ui.i18n import DEFAULT, i18n, t
from playground.ui.ranges import CheckedSlider, range_set_by_handler

TEXT = "The cat sat on the mat because it was warm, and the dog watched it from the door."
FOCUS_OUTPUTS = [
    "attn_status",
    "attn_summary",
    "attn_map",
    "attn_row",
    "attn_layer",
    "attn_head",
    "attn_position",
]
KEPT = 4  # attention maps kept (per browser tab and text) so a slider or a click needs no forward


class AttentionView(LessonView):
    key = "attn"
    lesson = LESSON
    label = "hood.attn.label"
    group = "inside"
    run_label = "hood.attn.run"
    action = "hood.attn.action"
    explain = "hood.attn.explain"  # says MAX_TOKENS
    outputs = ("attn_grid", "attn_map", "attn_row", "attn_layer", "attn_head", "attn_position")
    main = "attn_grid"
    quick: ClassVar[dict[str, Any]] = {"attn_text": "The cat sat on the mat."}

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, tuple[int, ...]], AttentionMaps] = OrderedDict()
        self._lock = threading.Lock()

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        text_info = i18n("hood.attn.text.info")  # says MAX_TOKENS
        w["attn_text"] = gr.Textbox(TEXT, label=i18n("hood.attn.text"), lines=2, info=text_info)
        w["attn_submit"] = w["attn_text"]  # Enter runs the view
        run_row(w, self)
        w["attn_grid"] = gr.Plot(label=i18n("hood.attn.plot.grid"), elem_id="hood-attn-grid")
        w["attn_cell"] = gr.Textbox(visible="hidden", elem_id="hood-attn-cell", label="clicked cell")
        with gr.Row():
            w["attn_layer"] = CheckedSlider(
                1, env.layers, value=max(1, env.layers // 2), step=1, label=i18n("hood.attn.layer_label")
            )
            w["attn_head"] = CheckedSlider(1, env.heads, value=1, step=1, label=i18n("hood.attn.head_label"))
            # its range follows the text: the handler checks it, and says when it shows another
            w["attn_position"] = range_set_by_handler(
                UncheckedSlider(
                    0,
                    1,
                    value=0,
                    step=1,
                    label=i18n("hood.attn.position"),
                    info=i18n("hood.attn.position.info"),
                )
            )
        with gr.Row():
            w["attn_map"] = gr.Plot(label=i18n("hood.attn.plot.map"), elem_id="hood-attn-map")
            w["attn_row"] = gr.Plot(label=i18n("hood.attn.plot.row"), elem_id="hood-attn-row")

    def run(
        self, ctx: RunContext, attn_text: str, attn_layer: float, attn_head: float
    ) -> Iterator[dict[str, Any]]:
        """Read the text with eager attention; show the grid, one head's triangle and one query's row."""
        view, lang = self.maps(ctx, attn_text), ctx.lang
        position = len(view.ids) - 1  # a new text starts at its last token: the widest row
        layer_head = _layer_head(attn_layer, attn_head, lang)
        yield views(view, *layer_head, position, lang=lang)

    def maps(self, ctx: RunContext, text: str) -> AttentionMaps:
        """This tab's attention for the text, kept for the last few (tab, text) pairs."""
        if not (text or "").strip():
            raise PlaygroundError(
                "The text is empty: type something to look at.", key="hood.attention.error.empty"
            )
        ids = encode_text(ctx.engine.tokenizer, text)
        key = (ctx.session, tuple(ids))
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        view = attention_lesson.run(ctx.engine, ids, control=ctx.control)
        with self._lock:
            self._kept[key] = view
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        return view

    def focus(
        self, tab: TabServices, text: str, layer: float, head: float, position: float, request: Any = None
    ) -> dict[str, Any]:
        """Another layer, head or query position of the same text (its weights are kept)."""
        ctx = tab.context(request, self.key)
        view, lang = self.maps(ctx, text), ctx.lang
        layer_head = _layer_head(layer, head, lang)
        # grid=False: the grid is not among this event's outputs (only a new text changes it)
        at = as_whole(position, t("hood.attn.position", lang))
        return tab.remember(request, self.key, views(view, *layer_head, at, grid=False, lang=lang))

    def cell(
        self, tab: TabServices, cell: str, text: str, position: float, request: Any = None
    ) -> dict[str, Any]:
        """A click on a thumbnail of the grid ("layer,head:stamp") enlarges that head."""
        try:
            layer, head = (int(x) for x in str(cell).split(":")[0].split(","))
        except ValueError:
            raise PlaygroundError(
                "Not a grid cell: {cell!r} (expected 'layer,head').", key="hood.attn.error.cell", cell=cell
            ) from None
        ctx = tab.context(request, self.key)
        view, lang = self.maps(ctx, text), ctx.lang
        at = as_whole(position, t("hood.attn.position", lang))
        return tab.remember(request, self.key, views(view, layer, head, at, grid=False, lang=lang))

    def wire(self, w: Widgets, tab: TabServices) -> None:
        def hood_attention_focus(
            attn_text: str,
            attn_layer: float,
            attn_head: float,
            attn_position: float,
            request: gr.Request = None,
        ) -> dict[str, Any]:
            """Another layer, head or query position of the same text (its weights are kept)."""
            return self.focus(tab, attn_text, attn_layer, attn_head, attn_position, request)

        def hood_attention_cell(
            attn_cell: str, attn_text: str, attn_position: float, request: gr.Request = None
        ) -> dict[str, Any]:
            return self.cell(tab, attn_cell, attn_text, attn_position, request)

        on = {"status": "attn_status", "trigger_mode": "always_last"}
        focus = [w["attn_layer"].release, w["attn_head"].release, w["attn_position"].release]
        connect(focus, hood_attention_focus, w, FOCUS_OUTPUTS, api_name="hood_attention_focus", **on)
        connect(w["attn_cell"].change, hood_attention_cell, w, FOCUS_OUTPUTS, api_name=None, **on)


def _layer_head(layer: Any, head: Any, lang: str) -> tuple[int, int]:
    """The layer and head sliders' values as whole numbers (an error names the slider in lang)."""
    return as_whole(layer, t("hood.attn.layer_label", lang)), as_whole(head, t("hood.attn.head_label", lang))


def views(
    view: AttentionMaps, layer: int, head: int, position: int, grid: bool = True, lang: str = DEFAULT
) -> dict[str, Any]:
    """The chosen head's triangle, the chosen query's row, the sliders, the summary and (grid) the
    layer × head grid, which only a new text changes."""
    check_layer_and_head(view, layer, head)
    position, moved = query_position(view, position, lang)
    sink = view.sink_share()
    matrix = view.maps[layer - 1, head - 1].numpy()
    share = float(sink[layer - 1, head - 1])
    title = t("hood.attn.plot.map_title", lang, layer=layer, head=head)
    token = view.tokens[position]
    row_title = t("hood.attn.plot.row_title", lang, position=position, token=token, layer=layer, head=head)
    shown: dict[str, Any] = {
        "attn_map": plots.attention_map_figure(matrix, view.tokens, title, share, lang),
        "attn_row": plots.query_row_figure(matrix[position], view.tokens, position, row_title, lang),
        "attn_layer": gr.update(value=layer, maximum=view.layers),
        "attn_head": gr.update(value=head, maximum=view.heads),
        # a slider needs maximum > minimum: a one-token text keeps a 0..1 slider (position 0)
        "attn_position": gr.update(value=position, maximum=max(1, len(view.ids) - 1)),
        "attn_summary": summary(view, layer, head, share, lang),
        "attn_status": status_line(
            t("hood.attn.phase", lang, tokens=len(view.ids), layers=view.layers, heads=view.heads)
            + (f" · {moved}" if moved else ""),
            True,
            lang,
        ),
    }
    if grid:
        shown["attn_grid"] = plots.attention_grid_figure(view.thumbnails().numpy(), sink.numpy(), lang)
    return shown


def check_layer_and_head(view: AttentionMaps, layer: int, head: int) -> None:
    """A layer and a head of this model, or a message naming the one that is not (a clicked cell)."""
    layer_name, head_name = Message("hood.attn.layer", "Layer"), Message("hood.attn.head", "Head")
    for what, value, high in ((layer_name, layer, view.layers), (head_name, head, view.heads)):
        if not 1 <= value <= high:
            raise PlaygroundError(
                "{what} {value} is outside this model's range 1–{high}.",
                key="hood.attn.outside",
                what=what,
                value=value,
                high=high,
            )


def query_position(view: AttentionMaps, asked: int, lang: str = DEFAULT) -> tuple[int, str]:
    """The query position shown and, when it is not the one asked (the slider's position from a longer
    text), a note saying so."""
    position = min(max(asked, 0), len(view.ids) - 1)
    if position == asked:
        return position, ""
    return position, t("hood.attn.position_moved", lang, value=asked, last=len(view.ids) - 1, shown=position)


def summary(view: AttentionMaps, layer: int, head: int, share: float, lang: str = DEFAULT) -> str:
    return t(
        "hood.attn.summary",
        lang,
        layer=layer,
        head=head,
        share=share,
        token=html.escape(view.tokens[0]),
        uniform=view.uniform_share(),
        overall=float(view.sink_share().mean()),
    )


VIEW = AttentionView()
