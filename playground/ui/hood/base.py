"""The view contract of the "Under the hood" tab: one `LessonView` subclass per lesson.

A view builds its sub-tab (`layout`), turns its widgets into a run of its lesson (`run`, a
generator yielding {component name: value} as the lesson's result fills), and may wire extra
events (`wire`: clicks on a figure, sliders that refocus without the model). ui/hood/tab.py does
the rest for every view alike: the Run / Stop / Save trace row, the status and summary lines,
streaming, Stop, errors, the trace, the API endpoint `/hood_<lesson name>`.
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import gradio as gr

from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.tokens import byte_groups, group_text, token_texts, visible_text
from playground.hood.common import Lesson
from playground.ui.common import Widgets, as_whole
from playground.ui.i18n import DEFAULT, i18n, localize, t
from playground.workspace import Workspace

# The lessons' groups, in order: a row of group tabs, each with a row of its lessons' tabs (the
# values are the groups' names: keys of playground/ui/i18n).
GROUPS = {
    "tokens": "hood.group.tokens",
    "inside": "hood.group.inside",
    "cost": "hood.group.cost",
    "faster": "hood.group.faster",
    "serving": "hood.group.serving",
}
GREEN, RED, BLUE = "rgba(44,160,44,0.30)", "rgba(214,39,40,0.30)", "rgba(42,125,225,0.30)"


@dataclass
class HoodEnv:
    """What the views are built with: the engine, an optional draft engine, the model's sizes."""

    engine: Engine
    draft: Engine | None = None
    layers: int = 32  # placeholders when the engine has no config here (a remote one)
    heads: int = 32

    @classmethod
    def of(cls, engine: Engine, draft: Engine | None) -> HoodEnv:
        dims = engine.dims
        return cls(engine, draft, dims.layers, dims.heads) if dims else cls(engine, draft)


@dataclass
class RunContext:
    """What one run of a view gets: the engine, Stop (control), and this browser tab's objects."""

    engine: Engine
    draft: Engine | None
    control: Control
    workspace: Workspace
    session: str = ""  # the browser tab's session id
    lang: str = DEFAULT  # the page's language: what the run says (playground/ui/i18n)
    shown: dict[str, Any] = field(default_factory=dict)  # what the view showed after its last run


class LessonView:
    """One lesson's sub-tab (see the module docstring). Subclasses set the class attributes; every
    text a person reads is a key of playground/ui/i18n (en.py, zh.py), said in the page's language."""

    key: ClassVar[str]  # component-name prefix and trace view name ("kv")
    lesson: ClassVar[Lesson]  # the engine side: name, title, needs, run
    label: ClassVar[str]  # the sub-tab's label (a key)
    group: ClassVar[str]  # the group of lessons its sub-tab is in (GROUPS: one row of tabs each)
    explain: ClassVar[str]  # the texts' words for the lesson, then what it shows (a key: Markdown)
    run_label: ClassVar[str]  # the Run button (a key)
    action: ClassVar[str]  # what the run does, for the status line's "Running: <action>…" (a key)
    outputs: ClassVar[tuple[str, ...]]  # what a run sets besides <key>_status and <key>_summary
    tables: ClassVar[dict[str, list[str]]] = {}  # a table output's column headers (for traces)
    # widget values for a short run (the browser tests and the gallery drive the UI with them)
    quick: ClassVar[dict[str, Any]] = {}
    main: ClassVar[str]  # the component that is the lesson's main visual (fits the window on stage)

    @property
    def tab_id(self) -> str:
        return f"hood-{self.key}"

    @property
    def group_id(self) -> str:
        return f"hood-group-{self.group}"

    @property
    def api_name(self) -> str:
        return f"hood_{self.lesson.name}"

    @property
    def all_outputs(self) -> list[str]:
        return [f"{self.key}_status", f"{self.key}_summary", *self.outputs]

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        """The sub-tab's components, by name into w; call run_row(w, self) where the run row goes."""
        raise NotImplementedError

    def run(self, ctx: RunContext, **inputs: Any) -> Iterator[dict[str, Any]]:
        """Parse the inputs, run the lesson, yield views by component name (the last is the result)."""
        raise NotImplementedError

    def wire(self, w: Widgets, tab: TabServices) -> None:
        """Extra events beyond Run / Stop / Save (none by default): tab.context(request, key) gives
        a run's context, tab.remember(request, key, views) keeps an update for the trace."""


class TabServices(Protocol):
    """What a view's own events may ask of the tab (ui/hood/tab.py HoodTab provides it)."""

    def context(self, request: gr.Request | None, key: str, control: Control | None = None) -> RunContext:
        """A run's context: the engine, Stop, this tab's workspace and what the view shows now."""
        ...

    def remember(
        self, request: gr.Request | None, key: str, views: dict[str, Any], fresh: bool = False
    ) -> dict[str, Any]:
        """Keep what the view shows now (its trace is saved from it); returns views."""
        ...


def run_row(w: dict[str, Any], view: LessonView) -> None:
    """Run / Stop / Save trace, then the status and summary lines (every view has them)."""
    name = view.key
    with gr.Row(elem_classes=["hood-run-row"]):
        run = i18n(view.run_label)
        w[f"{name}_run"] = gr.Button(run, variant="primary", scale=2, elem_id=f"hood-{name}-run")
        w[f"{name}_stop"] = gr.Button(i18n("hood.stop"), scale=1, elem_id=f"hood-{name}-stop")
        w[f"{name}_save"] = gr.Button(i18n("hood.save"), scale=1, elem_id=f"hood-{name}-save")
    w[f"{name}_trace_file"] = gr.File(label=i18n("hood.trace_file"), interactive=False, visible=False)
    w[f"{name}_status"] = gr.Markdown("", elem_id=f"hood-{name}-status")
    w[f"{name}_summary"] = gr.Markdown("", elem_id=f"hood-{name}-summary")


def status(view: LessonView, phase: str, final: bool, lang: str = DEFAULT) -> dict[str, str]:
    """The status line: 'Running: <phase>' while a run goes, 'Done: <phase>' at its end, in lang (a
    phase the lesson made is a Message)."""
    return {f"{view.key}_status": status_line(phase, final, lang)}


def status_line(phase: str, final: bool, lang: str = DEFAULT) -> str:
    """'Running: <phase>' or 'Done: <phase>' in lang."""
    return t("hood.status.done" if final else "hood.status.running", lang, phase=localize(phase, lang))


def spans(
    tokenizer: Any, ids: list[int], colour: str = "", strike: bool = False, context: Sequence[int] = ()
) -> str:
    """Tokens as inline spans (visible whitespace), optionally on a coloured background; the byte
    tokens of a character split over several share one span that shows the character (its title
    says which bytes). context: the ids before (a character may start there)."""
    style = f"background:{colour};" if colour else ""
    style += "text-decoration:line-through;" if strike else ""
    texts = token_texts(tokenizer, ids, context)
    out = []
    for run in byte_groups(texts):
        members = [texts[i] for i in run]
        split = [t for t in members if t.split]
        shown = visible_text(group_text(members)) if split else members[0].visible
        title = f" title='{html.escape('; '.join(t.describe() for t in split))}'" if split else ""
        box = f"{style}border-radius:3px;padding:0 1px;margin:0 1px"
        out.append(f"<span{title} style='{box}'>{html.escape(shown)}</span>")
    return "".join(out)


def token_ids(values: list[Any] | None, lang: str = DEFAULT) -> list[int]:
    """Token ids from a multiselect's values."""
    return [as_whole(v, t("hood.token_id", lang)) for v in values or []]


def verdict(ok: bool | None, yes: str, no: str, lang: str = DEFAULT) -> str:
    """'**<yes> ✓**' or '**<no> ✗**' (the checks every lesson states); yes and no are keys."""
    return f"**{t(yes, lang)} ✓**" if ok else f"**{t(no, lang)} ✗**"
