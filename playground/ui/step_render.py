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
from playground.plots.step import cumulative_logprob_figure, distribution_figure
from playground.step import StepSession, TextProbability
from playground.step.snapshot import CandidateView, StepSnapshot, take_snapshot
from playground.tree import ROOT
from playground.ui import i18n
from playground.ui.common import as_number
from playground.ui.token_html import chain_text, legend_html, percent, step_text_spans

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
    "raw": "raw (the model)",
    "repetition_penalty": "repetition penalty",
    "temperature": "temperature",
    "top_k": "top-k",
    "top_p": "top-p",
    "min_p": "min-p",
    "typical_p": "typical-p",
}
LEDGER_COLUMNS = ["step", "token", "how", "prob", "log-prob", "rank", "entropy", "cum log-prob", "perplexity"]
LEDGER_COLUMNS.append("after sampling")
DEFAULT_PROMPT = "The capital of France is"
# A candidate button's words
AFTER_SAMPLING = "{p:.1%} after sampling"
REMOVED = "removed by sampling"


# --- rendering (pure: session -> component values) ---------------------------------------


def stage_choice(name: str) -> tuple[str, str]:
    """(label on screen, stage name) for the stage selector."""
    return STAGE_LABELS.get(name, name.replace("_", " ")), name


def read_settings(
    temperature: Any, top_k: Any, top_p: Any, min_p: Any, typical_p: Any, repetition_penalty: Any, order: Any
) -> SamplingSettings:
    """The settings widgets' values as validated SamplingSettings (errors name the bad value)."""
    values = {
        "temperature": as_number(temperature, "temperature"),
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


def text_html(snap: StepSnapshot) -> str:
    """Prompt (dimmed) then the generated tokens coloured by probability, with hover cards.

    The span texts are the whole sequence decoded incrementally (`stream_pieces`), so the text
    reads exactly as decoded; a character's byte tokens stand under it (`step_text_spans`)."""
    prompt = html.escape(snap.prompt_text).replace("\n", "<br>")
    spans = f"<span class='tok-prompt'>{prompt}</span>{step_text_spans(snap.records, snap.pieces)}"
    return f"{legend_html()}<div class='token-stream step-text'>{spans}</div>"


def status_markdown(snap: StepSnapshot) -> str:
    used, limit = snap.prompt_tokens + len(snap.records), snap.context_limit
    if not snap.records:
        empty = (
            " (an empty prompt: the start token only)" if not snap.prompt and snap.prompt_tokens == 1 else ""
        )
        tokens = f"{snap.prompt_tokens:,} token{'s' * (snap.prompt_tokens != 1)}{empty}"
        return f"Prompt: {tokens} · context {used:,}/{limit:,}"
    steps = len(snap.records)
    count = f"{steps} generated token{'s' * (steps != 1)}"
    totals = f"log P = {snap.cum_logprobs[-1]:.3f} · perplexity {snap.perplexity(steps):.2f}"
    return f"{count} · {totals} · context {used:,}/{limit:,}"


def candidate_buttons(snap: StepSnapshot) -> dict[str, Any]:
    """Button updates for the top candidates."""
    updates: dict[str, Any] = {}
    for i, name in enumerate(CANDIDATE_BUTTONS, start=1):
        if i > len(snap.candidates):
            updates[name] = gr.update(visible=False)
            continue
        updates[name] = gr.update(value=candidate_label(i, snap.candidates[i - 1]), visible=True)
    return updates


def candidate_label(i: int, cand: CandidateView, lang: str = i18n.DEFAULT) -> str:
    """'[1] ␣Paris   77.3% · 77.3% after sampling'; a token that starts a character says what the
    model goes on to make of it: '[4] <0xE7> (byte 1/3)   6.2% · 6.2% after sampling · becomes 的 31%'."""
    sampled = cand.sampled_prob
    after = AFTER_SAMPLING.format(p=sampled) if sampled > 0 else REMOVED
    key = f"[{i}] " if i <= 9 else ""
    if not cand.becomes:
        return f"{key}{cand.shown}   {cand.prob:.1%} · {after}"
    chars = ", ".join(f"{char} {prob:.0%}" if prob >= 0.005 else f"{char} <1%" for char, prob in cand.becomes)
    return f"{key}{cand.visible}   {cand.prob:.1%} · {after} · {i18n.t('step.becomes', lang, chars=chars)}"


def distribution_view(snap: StepSnapshot, k: int, stage_name: str) -> tuple:
    """The bar chart after the chosen stage, and the stage selector's choices."""
    stage = stage_name if stage_name in snap.stages else snap.stages[-1]
    cands = snap.candidates[:k]
    figure = distribution_figure(
        [f"{c.rank}. {c.visible}" for c in cands],
        [c.prob for c in cands],
        [c.stage_probs[stage] for c in cands],
        [c.stage_probs[stage] == 0 for c in cands],
        stage_choice(stage)[0],
    )
    return figure, gr.update(choices=[stage_choice(name) for name in snap.stages], value=stage)


def ledger_rows(snap: StepSnapshot) -> list[list[Any]]:
    rows, labels = [], [read.visible for read in read_pieces(snap.records)]  # '美 (byte 1/3)'
    for step, (t, cum) in enumerate(zip(snap.records, snap.cum_logprobs, strict=True), start=1):
        sampled = None if t.sampled_prob is None else round(t.sampled_prob, 6)
        entropy = None if t.entropy is None else round(t.entropy, 3)
        rows.append(
            [
                step,
                labels[step - 1],
                t.source,
                round(t.prob, 6),
                round(t.logprob, 4),
                t.rank,
                entropy,
                round(cum, 4),
                round(snap.perplexity(step), 3),
                sampled,
            ]
        )
    return rows


def tree_html(snap: StepSnapshot) -> str:
    """The branch tree: chains of single tokens as one segment, branch points as nested lists."""
    children: dict[int, list[int]] = {}
    labels: dict[int, tuple[int, str]] = {}  # node -> (parent, visible token)
    for node, parent, visible in snap.tree:
        children.setdefault(parent, []).append(node)
        labels[node] = parent, visible
    if not children.get(ROOT):
        return "<div class='step-tree'><i>No tokens yet.</i></div>"
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


def branch_choices(snap: StepSnapshot) -> Any:
    choices = [(f"#{b.node_id} · {b.length} tokens · …{b.text[-40:]}", b.node_id) for b in snap.branches]
    current = next((b.node_id for b in snap.branches if b.current), None)
    return gr.update(choices=choices, value=current)


def render_snapshot(snap: StepSnapshot, k: int = 10, stage_name: str = "raw") -> dict[str, Any]:
    """Every view of the tab, by component name, from plain data (live or recorded)."""
    figure, stage_update = distribution_view(snap, k, stage_name)
    labels = [read.visible for read in read_pieces(snap.records)]  # a byte piece: '美 (byte 1/3)'
    curve = cumulative_logprob_figure([r.logprob for r in snap.records], labels)
    return {
        "prompt": snap.prompt,
        "chat": snap.chat,
        "text": text_html(snap),
        "status": status_markdown(snap) + "".join(f"\n\n> {note}" for note in snap.notes),
        **candidate_buttons(snap),
        "chart": figure,
        "stage": stage_update,
        "ledger": ledger_rows(snap),
        "curve": curve,
        "tree": tree_html(snap),
        "branch": branch_choices(snap),
    }


def render_step_trace(data: dict[str, Any], stage_name: str | None = None) -> dict[str, Any]:
    """A recorded session's views (the snapshot holds every number, every stage included)."""
    k, stage = data.get("view") or (10, "raw")
    return render_snapshot(StepSnapshot.from_dict(data["snapshot"]), int(k), stage_name or stage)


def render(session: StepSession, k: int = 10, stage_name: str = "raw") -> dict[str, Any]:
    """Every view of the tab for a live session."""
    return render_snapshot(take_snapshot(session, max(k, N_BUTTONS)), k, stage_name)


def probability_markdown(result: TextProbability, path: Sequence[TokenRecord] = ()) -> str:
    head, reads = result.tokens[0], read_after(path, result.tokens)
    # a byte piece says which byte; the text is a code span, shown as typed
    text = reads[0].candidate if "\ufffd" in result.text else visible_text(result.text)
    lines = [
        f"`{text.replace('`', 'ˋ')}`: P = {result.prob:.3g} (log-prob {result.logprob:.3f}) · "
        f"first token rank {head.rank} · first token after sampling {percent(head.sampled_prob)}"
    ]
    if len(result.tokens) > 1:
        rows = zip(result.tokens, reads, strict=True)
        lines += [f"- `{r.visible}` (id {t.id}): P = {t.prob:.3g}, rank {t.rank}" for t, r in rows]
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
            raise PlaygroundError(f"Token ids must be integers, got {value!r}") from exc
    if not isinstance(value, Sequence) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    ):
        raise PlaygroundError(f"Token ids must be a list of integers, got {value!r}")
    return list(value)


def _as_token_id(value: Any) -> Any:
    """Integral numbers and digit strings become ints; anything else goes to the session, which names it."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return int(value) if isinstance(value, float) and value.is_integer() else value
