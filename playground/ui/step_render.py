"""The Step-by-step tab's rendering: a session's plain snapshot in, component values out (no gradio
events, no model): the text with its token cards, the status line, the candidate buttons, the
distribution chart at a stage, the ledger, the log-prob curve and the branch tree. Replay draws a
recorded step trace with the same functions."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

import gradio as gr

from playground.engine.records import TokenRecord
from playground.engine.sampling import DEFAULT_ORDER, SamplingSettings, validate_settings
from playground.engine.tokens import read_after, read_pieces, visible_text
from playground.errors import PlaygroundError
from playground.messages import Message
from playground.plots.step import cumulative_logprob_figure, distribution_figure
from playground.step import StepSession, TextProbability
from playground.step.snapshot import CandidateView, StepSnapshot, take_snapshot
from playground.tree import ROOT
from playground.ui.common import as_number
from playground.ui.i18n import DEFAULT, i18n, localize, t
from playground.ui.token_html import chain_text, legend_html, percent, source_name, step_text_spans

N_BUTTONS = 10  # candidate buttons (keys 1-9 pick the first nine)
CANDIDATE_BUTTONS = [f"cand_{i}" for i in range(1, N_BUTTONS + 1)]
VIEW_OUTPUTS = [
    "prompt",
    "chat",
    "text",
    "status",
    *CANDIDATE_BUTTONS,
    "chart",
    "stage",
    "ledger",
    "curve",
    "tree",
    "branch",
]
SETTINGS_INPUTS = ["temperature", "top_k", "top_p", "min_p", "typical_p", "repetition_penalty", "order"]
# How each stage reads on screen (the engine names them like transformers' processors).
STAGE_LABELS = {
    "raw": "step.stage.raw",
    "repetition_penalty": "step.stage.repetition_penalty",
    "temperature": "step.stage.temperature",
    "top_k": "step.stage.top_k",
    "top_p": "step.stage.top_p",
    "min_p": "step.stage.min_p",
    "typical_p": "step.stage.typical_p",
}
LEDGER_KEYS = ["step.col.step", "step.col.token", "step.col.how", "step.col.prob", "step.col.logprob"]
LEDGER_KEYS += [
    "step.col.rank",
    "step.col.entropy",
    "step.col.cum",
    "step.col.perplexity",
    "step.col.sampled",
]
DEFAULT_PROMPT = "The capital of France is"


def ledger_headers(lang: str = DEFAULT) -> list[str]:
    """The ledger's column names in lang (a Dataframe's headers are set by the server)."""
    return [t(key, lang) for key in LEDGER_KEYS]


LEDGER_COLUMNS = ledger_headers()  # in English (a recorded trace's ledger)


# --- rendering (pure: session -> component values) ---------------------------------------


def stage_choice(name: str) -> tuple[Any, str]:
    """(label on screen, translated in the browser; stage name) for the stage selector."""
    return (i18n(STAGE_LABELS[name]) if name in STAGE_LABELS else name.replace("_", " ")), name


def stage_label(name: str, lang: str = DEFAULT) -> str:
    """A stage's name as a chart says it, in lang."""
    return t(STAGE_LABELS[name], lang) if name in STAGE_LABELS else name.replace("_", " ")


def read_settings(
    temperature: Any, top_k: Any, top_p: Any, min_p: Any, typical_p: Any, repetition_penalty: Any, order: Any
) -> SamplingSettings:
    """The settings widgets' values as validated SamplingSettings (errors name the bad value)."""
    values = {
        "temperature": as_number(temperature, Message.of_key("step.temperature", "temperature")),
        "top_k": top_k,
        "top_p": top_p,
        "min_p": min_p,
    }
    values |= {"typical_p": typical_p, "repetition_penalty": repetition_penalty}
    if isinstance(top_k, float) and top_k.is_integer():
        values["top_k"] = int(top_k)
    if order:  # chosen stages first, in the order chosen; the rest keep the default order
        chosen = [name for name in order if name in DEFAULT_ORDER]
        values["order"] = chosen + [name for name in DEFAULT_ORDER if name not in chosen]
    return validate_settings(values)


def settings_values(settings: SamplingSettings) -> dict[str, Any]:
    """Values for the settings widgets showing `settings`."""
    s = settings
    values = (s.temperature, s.top_k, s.top_p, s.min_p, s.typical_p, s.repetition_penalty, list(s.order))
    return dict(zip(SETTINGS_INPUTS, values, strict=True))


def text_html(snap: StepSnapshot, lang: str = DEFAULT) -> str:
    """Prompt (dimmed) then the generated tokens coloured by probability, with hover cards (in lang).

    The span texts are the whole sequence decoded incrementally (`stream_pieces`), so the text
    reads exactly as decoded; a character's byte tokens stand under it (`step_text_spans`)."""
    prompt = html.escape(snap.prompt_text).replace("\n", "<br>")
    spans = f"<span class='tok-prompt'>{prompt}</span>{step_text_spans(snap.records, snap.pieces, lang)}"
    return f"{legend_html(lang=lang)}<div class='token-stream step-text'>{spans}</div>"


def status_markdown(snap: StepSnapshot, lang: str = DEFAULT) -> str:
    used, limit = snap.prompt_tokens + len(snap.records), snap.context_limit
    context = t("step.status.context", lang, used=used, limit=limit)
    if not snap.records:
        empty = t("step.status.empty", lang) if not snap.prompt and snap.prompt_tokens == 1 else ""
        one = snap.prompt_tokens == 1
        tokens = t("step.status.tokens_one" if one else "step.status.tokens", lang, n=snap.prompt_tokens)
        return t("step.status.prompt", lang, tokens=tokens, empty=empty, context=context)
    steps = len(snap.records)
    count = t("step.status.generated_one" if steps == 1 else "step.status.generated", lang, n=steps)
    totals = t("step.status.totals", lang, logp=snap.cum_logprobs[-1], perplexity=snap.perplexity(steps))
    return f"{count} · {totals} · {context}"


def candidate_buttons(snap: StepSnapshot, lang: str = DEFAULT) -> dict[str, Any]:
    """Button updates for the top candidates."""
    updates: dict[str, Any] = {}
    for i, name in enumerate(CANDIDATE_BUTTONS, start=1):
        if i > len(snap.candidates):
            updates[name] = gr.update(visible=False)
            continue
        updates[name] = gr.update(value=candidate_label(i, snap.candidates[i - 1], lang), visible=True)
    return updates


def candidate_label(i: int, cand: CandidateView, lang: str = DEFAULT) -> str:
    """'[1] ␣Paris   77.3% · 77.3% after sampling'; a token that starts a character says what the
    model goes on to make of it: '[4] <0xE7> (byte 1/3)   6.2% · 6.2% after sampling · becomes 的 31%'."""
    sampled = cand.sampled_prob
    after = t("step.after_sampling", lang, p=sampled) if sampled > 0 else t("step.removed", lang)
    key = f"[{i}] " if i <= 9 else ""
    if not cand.becomes:
        return f"{key}{localize(cand.shown, lang)}   {cand.prob:.1%} · {after}"
    chars = ", ".join(f"{char} {prob:.0%}" if prob >= 0.005 else f"{char} <1%" for char, prob in cand.becomes)
    becomes = t("step.becomes", lang, chars=chars)
    return f"{key}{localize(cand.visible, lang)}   {cand.prob:.1%} · {after} · {becomes}"


def distribution_view(snap: StepSnapshot, k: int, stage_name: str, lang: str = DEFAULT) -> tuple:
    """The bar chart after the chosen stage (in lang), and the stage selector's choices."""
    stage = stage_name if stage_name in snap.stages else snap.stages[-1]
    cands = snap.candidates[:k]
    figure = distribution_figure(
        [f"{c.rank}. {localize(c.visible, lang)}" for c in cands],
        [c.prob for c in cands],
        [c.stage_probs[stage] for c in cands],
        [c.stage_probs[stage] == 0 for c in cands],
        stage_label(stage, lang),
        stage == "raw",
        lang,
    )
    return figure, gr.update(choices=[stage_choice(name) for name in snap.stages], value=stage)


def ledger_rows(snap: StepSnapshot, lang: str = DEFAULT) -> list[list[Any]]:
    rows, labels = [], token_labels(snap.records, lang)  # '美 (byte 1/3)'
    for step, (record, cum) in enumerate(zip(snap.records, snap.cum_logprobs, strict=True), start=1):
        sampled = None if record.sampled_prob is None else round(record.sampled_prob, 6)
        entropy = None if record.entropy is None else round(record.entropy, 3)
        rows.append(
            [
                step,
                labels[step - 1],
                source_name(record.source, lang),
                round(record.prob, 6),
                round(record.logprob, 4),
                record.rank,
                entropy,
                round(cum, 4),
                round(snap.perplexity(step), 3),
                sampled,
            ]
        )
    return rows


def token_labels(records: Sequence[TokenRecord], lang: str = DEFAULT) -> list[str]:
    """Each token as one line for a chart or the ledger (a byte piece: '美 (byte 1/3)'), in lang."""
    return [localize(read.visible, lang) for read in read_pieces(records)]


def tree_html(snap: StepSnapshot, lang: str = DEFAULT) -> str:
    """The branch tree: chains of single tokens as one segment, branch points as nested lists."""
    children: dict[int, list[int]] = {}
    labels: dict[int, tuple[int, str]] = {}  # node -> (parent, visible token)
    for node, parent, visible in snap.tree:
        children.setdefault(parent, []).append(node)
        labels[node] = parent, visible
    if not children.get(ROOT):
        return f"<div class='step-tree'><i>{html.escape(t('step.tree.empty', lang))}</i></div>"
    return f"<div class='step-tree'>{_subtree(children, labels, ROOT, set(snap.path))}</div>"


def _subtree(children: dict[int, list[int]], labels: dict, node_id: int, on_path: set[int]) -> str:
    items = []
    for child in children.get(node_id, []):
        chain = [child]
        while len(children.get(chain[-1], [])) == 1:
            chain.append(children[chain[-1]][0])
        text = chain_text(labels, chain)  # a character's byte tokens as the character
        current = "step-current" if chain[-1] in on_path or chain[0] in on_path else ""
        label = f"<span class='{current}'>{html.escape(text)}</span> <small>#{chain[-1]}</small>"
        items.append(f"<li>{label}{_subtree(children, labels, chain[-1], on_path)}</li>")
    return f"<ul>{''.join(items)}</ul>" if items else ""


def branch_choices(snap: StepSnapshot, lang: str = DEFAULT) -> Any:
    choices = [
        (t("step.branch.choice", lang, id=b.node_id, length=b.length, text=b.text[-40:]), b.node_id)
        for b in snap.branches
    ]
    current = next((b.node_id for b in snap.branches if b.current), None)
    return gr.update(choices=choices, value=current)


def render_snapshot(
    snap: StepSnapshot, k: int = 10, stage_name: str = "raw", lang: str = DEFAULT, notes: Sequence[str] = ()
) -> dict[str, Any]:
    """Every view of the tab, by component name, from plain data (live or recorded), in lang; notes:
    said under the status line besides the engine's own."""
    figure, stage_update = distribution_view(snap, k, stage_name, lang)
    curve = cumulative_logprob_figure(
        [r.logprob for r in snap.records],
        token_labels(snap.records, lang),
        lang,
    )
    said = "".join(f"\n\n> {localize(note, lang)}" for note in [*snap.notes, *notes])
    return {
        "prompt": snap.prompt,
        "chat": snap.chat,
        "text": text_html(snap, lang),
        "status": status_markdown(snap, lang) + said,
        **candidate_buttons(snap, lang),
        "chart": figure,
        "stage": stage_update,
        "ledger": {"headers": ledger_headers(lang), "data": ledger_rows(snap, lang)},  # headers: the server's
        "curve": curve,
        "tree": tree_html(snap, lang),
        "branch": branch_choices(snap, lang),
    }


def render_step_trace(
    data: dict[str, Any], stage_name: str | None = None, lang: str = DEFAULT
) -> dict[str, Any]:
    """A recorded session's views (the snapshot holds every number, every stage included)."""
    k, stage = data.get("view") or (10, "raw")
    return render_snapshot(StepSnapshot.from_dict(data["snapshot"]), int(k), stage_name or stage, lang)


def render(
    session: StepSession, k: int = 10, stage_name: str = "raw", lang: str = DEFAULT, notes: Sequence[str] = ()
) -> dict[str, Any]:
    """Every view of the tab for a live session (notes: said under its status line)."""
    return render_snapshot(take_snapshot(session, max(k, N_BUTTONS)), k, stage_name, lang, notes)


def probability_markdown(
    result: TextProbability, path: Sequence[TokenRecord] = (), lang: str = DEFAULT
) -> str:
    head, reads = result.tokens[0], read_after(path, result.tokens)
    # a byte piece says which byte; the text is a code span, shown as typed
    text = localize(reads[0].candidate, lang) if "\ufffd" in result.text else visible_text(result.text)
    lines = [
        t(
            "step.probability",
            lang,
            text=text.replace("`", "ˋ"),
            p=result.prob,
            logprob=result.logprob,
            rank=head.rank,
            after=percent(head.sampled_prob, lang),
        )
    ]
    if len(result.tokens) > 1:
        rows = zip(result.tokens, reads, strict=True)
        lines += [
            t(
                "step.probability.token",
                lang,
                token=localize(r.visible, lang),
                id=tok.id,
                p=tok.prob,
                rank=tok.rank,
            )
            for tok, r in rows
        ]
    return "\n".join(lines)


def parse_token_ids(value: Any) -> list[int]:
    """A list of ids, or text holding them (JSON list, or separated by commas/spaces)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = (
                json.loads(text) if text.startswith("[") else [int(p) for p in text.replace(",", " ").split()]
            )
        except ValueError as exc:
            raise PlaygroundError(
                "Token ids must be integers, got {value!r}", key="step.error.ids", value=value
            ) from exc
    if not isinstance(value, Sequence) or not all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    ):
        raise PlaygroundError(
            "Token ids must be a list of integers, got {value!r}", key="step.error.id_list", value=value
        )
    return list(value)


def _as_token_id(value: Any) -> Any:
    """Integral numbers and digit strings become ints; anything else goes to the session, which names it."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return int(value) if isinstance(value, float) and value.is_integer() else value
