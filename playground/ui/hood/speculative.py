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
from playground.ui.i18n import DEFAULT, i18n, t
from playground.ui.ranges import CheckedSlider

COPY_PARAGRAPH = (
    "The old lighthouse stood on the cliff for two hundred years. Every night its keeper climbed the "
    "spiral stairs, trimmed the wick and polished the great lens until it shone. Ships passing in the "
    "storm saw its beam and turned away from the rocks below."
)
PRESETS = {  # the dropdown's values (its labels: PRESET_LABELS, in the page's language) -> the prompt
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
PRESET_LABELS = dict(
    zip(PRESETS, ("hood.spec.preset.copy", "hood.spec.preset.fix", "hood.spec.preset.story"), strict=True)
)
METHODS = {  # the radio's values (the API takes them) -> the lesson's method
    "prompt lookup (n-grams of the context)": "prompt_lookup",
    "early exit (the model's first k layers)": "early_exit",
    "draft model (--draft-model)": "draft",
}
METHOD_LABELS = {  # the lesson's method -> its label's key
    "prompt_lookup": "hood.spec.method.prompt_lookup",
    "early_exit": "hood.spec.method.early_exit",
    "draft": "hood.spec.method.draft",
}
MAX_TOKENS = 256
COLUMNS = [  # the table's headers (keys: the server sets them in the page's language)
    "hood.spec.col.round",
    "hood.spec.col.drafted",
    "hood.spec.col.p",
    "hood.spec.col.q",
    "hood.spec.col.test",
    "hood.spec.col.result",
]


class SpeculativeView(LessonView):
    key = "spec"
    lesson = LESSON
    label = "hood.spec.label"
    group = "faster"
    run_label = "hood.spec.run"
    action = "hood.spec.action"
    explain = "hood.spec.explain"
    outputs = ("spec_rounds", "spec_accept", "spec_speed", "spec_checks")
    main = "spec_rounds"
    tables: ClassVar[dict[str, list[str]]] = {"spec_checks": COLUMNS}
    quick: ClassVar[dict[str, Any]] = {"spec_tokens": 8}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        first = next(iter(PRESETS))
        with gr.Row():
            w["spec_preset"] = gr.Dropdown(
                [(i18n(PRESET_LABELS[name]), name) for name in PRESETS],
                value=first,
                label=i18n("hood.spec.preset"),
                scale=2,
                elem_classes=["stage-hide"],
            )
            w["spec_chat"] = gr.Checkbox(
                True,
                label=i18n("hood.spec.chat"),
                info=i18n("hood.spec.chat.info"),
                elem_classes=["stage-hide"],
            )
        w["spec_prompt"] = gr.Textbox(PRESETS[first], label=i18n("hood.spec.prompt"), lines=4)
        method = "hood.spec.method" if env.draft is not None else "hood.spec.method.no_draft"
        w["spec_method"] = gr.Radio(
            [(i18n(METHOD_LABELS[name]), value) for value, name in METHODS.items()],
            value=next(iter(METHODS)),
            label=i18n(method),
            elem_id="hood-spec-method",
        )
        with gr.Row():
            w["spec_k"] = UncheckedSlider(
                1, MAX_DRAFT, value=6, step=1, label=i18n("hood.spec.k"), info=i18n("hood.spec.k.info")
            )
            w["spec_exit"] = UncheckedSlider(
                # Gradio refuses minimum == maximum (a 2-layer model: 1 is the only choice)
                1,
                max(2, env.layers - 1),
                value=max(1, env.layers * 3 // 4),
                step=1,
                label=i18n("hood.spec.exit"),
                info=i18n("hood.spec.exit.info"),
            )
            w["spec_tokens"] = UncheckedSlider(
                8, MAX_TOKENS, value=64, step=1, label=i18n("hood.spec.tokens"), elem_id="hood-spec-tokens"
            )
            w["spec_temperature"] = CheckedSlider(
                0,
                1.5,
                value=0,
                step=0.05,
                label=i18n("hood.spec.temperature"),
                info=i18n("hood.spec.temperature.info"),
            )
        w["spec_seed"] = gr.Textbox(
            "0", label=i18n("hood.spec.seed"), info=i18n("hood.spec.seed.info"), elem_classes=["stage-hide"]
        )
        run_row(w, self)
        w["spec_rounds"] = gr.HTML(elem_id="hood-spec-rounds")
        with gr.Row():
            w["spec_accept"] = gr.Plot(label=i18n("hood.spec.plot.accept"), elem_id="hood-spec-accept")
            w["spec_speed"] = gr.Plot(label=i18n("hood.spec.plot.speed"))
        w["spec_checks"] = gr.Dataframe(
            headers=[t(key, DEFAULT) for key in COLUMNS],  # the page's language: HoodTab.hood_texts
            label=i18n("hood.spec.table"),
            interactive=False,
            max_height=320,
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
        lang = ctx.lang
        ids = encode_prompt(ctx.engine.tokenizer, spec_prompt or "", bool(spec_chat))
        method = METHODS.get(spec_method, spec_method)
        seed = parse_seed(spec_seed)
        exit_layer = as_whole(
            spec_exit, t("hood.spec.exit", lang)
        )  # read for every method: a bad one is named
        temperature = as_number(spec_temperature, t("hood.spec.temperature", lang))
        options = {
            "draft_tokens": as_whole(spec_k, t("hood.spec.k", lang)),
            "exit_layer": exit_layer if method == "early_exit" else None,
            "draft": ctx.draft,
            "settings": SamplingSettings(temperature=temperature),
            "seed": 0 if seed is None else seed,
        }
        tokens, result = as_whole(spec_tokens, t("hood.spec.tokens", lang)), None
        steps = speculative_lesson.iter_run(
            ctx.engine, ids, tokens, method, compare=True, control=ctx.control, **options
        )
        for result in steps:
            yield self.views(ctx.engine, result, final=False, lang=lang)
        if result is not None:
            yield self.views(ctx.engine, result, final=True, lang=lang)

    def views(
        self, lm: Engine, result: SpeculativeResult, final: bool, lang: str = DEFAULT
    ) -> dict[str, Any]:
        """Status while running; the rounds, figures, table and summary after each round."""
        views: dict[str, Any] = status(self, result.phase, final, lang)
        if not result.rounds:
            return views
        rounds = result.rounds
        times, tokens, total = [], [], 0
        for r in rounds:
            total += len(r.emitted)
            times.append(r.finished_at)
            tokens.append(total)
        views["spec_rounds"] = rounds_html(lm, result, lang)
        views["spec_accept"] = plots.acceptance_figure(
            [len(r.drafted) for r in rounds],
            [r.accepted for r in rounds],
            [r.bonus is not None for r in rounds],
            lang,
        )
        views["spec_speed"] = plots.speed_figure(result.plain_times, times, tokens, lang)
        views["spec_checks"] = check_rows(lm, result, lang)
        if final:
            views["spec_summary"] = summary(result, lang)
        return views

    def wire(self, w: Widgets, tab: TabServices) -> None:
        def spec_preset(spec_preset: str) -> dict[str, Any]:
            """A preset's prompt into the prompt box (no model)."""
            return {"spec_prompt": PRESETS.get(spec_preset, "")}

        connect(w["spec_preset"].input, spec_preset, w, ["spec_prompt"], api_name=None, model=False)


def rounds_html(lm: Engine, result: SpeculativeResult, lang: str = DEFAULT) -> str:
    rows = []
    for n, r in enumerate(result.rounds, start=1):
        kept = spans(lm.tokenizer, r.drafted[: r.accepted], GREEN)
        rejected = spans(lm.tokenizer, r.drafted[r.accepted :], RED, strike=True)
        bonus = spans(lm.tokenizer, [r.bonus], BLUE) if r.bonus is not None else ""
        rows.append(
            f"<div><small>{t('hood.spec.round', lang, round=n)}</small> {kept}{rejected} → {bonus}</div>"
        )
    legend = (
        f"<small><span style='background:{GREEN}'>{t('hood.spec.legend.accepted', lang)}</span> · "
        f"<span style='background:{RED};text-decoration:line-through'>{t('hood.spec.legend.rejected', lang)}"
        f"</span> · <span style='background:{BLUE}'>{t('hood.spec.legend.bonus', lang)}</span></small>"
    )
    style = "line-height:1.9;font-family:ui-monospace,monospace;font-size:13px"
    return f"{legend}<div class='hood-rounds' style='{style}'>{''.join(rows)}</div>"


def check_rows(lm: Engine, result: SpeculativeResult, lang: str = DEFAULT) -> list[list[Any]]:
    rows = []
    top, not_top = t("hood.spec.check.top", lang), t("hood.spec.check.not_top", lang)
    accepted, rejected = t("hood.spec.check.accepted", lang), t("hood.spec.check.rejected", lang)
    for n, r in enumerate(result.rounds, start=1):
        for c in r.checks:
            if result.greedy:
                test = top if c.accepted else not_top
            else:
                test = f"r = {c.draw:.3f} {'<' if c.accepted else '≥'} min(1, p/q) = {c.threshold:.3f}"
            piece = token_texts(lm.tokenizer, [c.token])[0].visible
            verdict = accepted if c.accepted else rejected
            rows.append([n, piece, round(c.target_prob, 4), round(c.draft_prob, 4), test, verdict])
    return rows


def summary(result: SpeculativeResult, lang: str = DEFAULT) -> str:
    method = t(METHOD_LABELS[result.method], lang)
    depth = t("hood.spec.sum.depth", lang, k=result.exit_layer) if result.exit_layer else ""
    rounds, tokens = len(result.rounds), len(result.ids)
    lines = [
        t(
            "hood.spec.sum.rounds",
            lang,
            method=method,
            depth=depth,
            drafts=result.draft_tokens,
            tokens=tokens,
            rounds=rounds,
            rate=result.acceptance_rate,
        )
    ]
    if result.plain_tokens_per_second:
        plain, spec = result.plain_tokens_per_second, result.tokens_per_second
        lines.append(t("hood.spec.sum.speed", lang, plain=plain, spec=spec, speedup=result.speedup))
    if result.speedup is not None and result.speedup < 1:
        lines.append(t("hood.spec.sum.slower", lang))
    if result.identical is not None:
        lines.append(t("hood.spec.sum.identical" if result.identical else "hood.spec.sum.different", lang))
    else:
        lines.append(t("hood.spec.sum.sampled", lang))
    return "\n\n".join(lines)


VIEW = SpeculativeView()
