"""Under the hood: six lessons of autoregressive generation, each measured live on the loaded model.

KV cache on vs off, prefill vs decode, attention and the causal mask, the logit lens,
speculative decoding and batching. Every number comes from the model in this process
(playground/cost.py, attention.py, lens.py, speculative.py, batching.py over the engine's
probes); nothing is simulated. Long runs stream their progress into each view's status line
and redraw their figures as they go; Stop ends a run within one step.
"""

from __future__ import annotations

import html
import statistics
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gradio as gr

from playground import batching, cost, lens, speculative
from playground.attention import MAX_TOKENS, AttentionView, attention_view
from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.prompts import encode_prompt, encode_text
from playground.engine.sampling import SamplingSettings
from playground.engine.tokens import decode_ids, token_piece
from playground.errors import PlaygroundError
from playground.plots import hood as plots
from playground.settings import Settings
from playground.traces import new_trace, save_trace
from playground.ui.common import as_number, as_whole, connect, parse_seed
from playground.ui.hood_record import VIEW_TITLES, record_views
from playground.views import whole_in_range
from playground.workspace import Workspaces

ATTENTION_TEXT = "The cat sat on the mat because it was warm, and the dog watched it from the door."
LENS_TEXT = "The capital of France is"
COPY_PARAGRAPH = (
    "The old lighthouse stood on the cliff for two hundred years. Every night its keeper climbed the "
    "spiral stairs, trimmed the wick and polished the great lens until it shone. Ships passing in the "
    "storm saw its beam and turned away from the rocks below."
)
SPEC_PRESETS = {
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
METHOD_LABELS = {
    "prompt lookup (n-grams of the context)": "prompt_lookup",
    "early exit (the model's first k layers)": "early_exit",
    "draft model (--draft-model)": "draft",
}
BATCH_PROMPTS = "\n".join(
    [
        "What is the capital of Italy?",
        "Name three primary colours.",
        "How many legs does a spider have?",
        "Say hello in Spanish.",
        "What is 12 times 12?",
        "Give me a synonym for happy.",
        "What gas do plants breathe in?",
        "Who wrote Romeo and Juliet?",
        "What is the boiling point of water in Celsius?",
        "Name a planet with rings.",
        "Translate 'thank you' into French.",
        "What is the largest ocean?",
        "How many days are in a leap year?",
        "What colour is a ripe banana?",
        "Name a mammal that can fly.",
        "What is the square root of 81?",
    ]
)
PD_LENGTHS = [16, 64, 256, 1024, 2048, 4096]
KV_OUTPUTS = ["kv_status", "kv_summary", "kv_latency", "kv_cumulative", "kv_bytes", "kv_text"]
PD_OUTPUTS = ["pd_status", "pd_summary", "pd_throughput", "pd_intensity", "pd_table"]
ATTN_FOCUS_OUTPUTS = [
    "attn_status",
    "attn_summary",
    "attn_map",
    "attn_row",
    "attn_layer",
    "attn_head",
    "attn_position",
]
ATTN_OUTPUTS = [
    "attn_status",
    "attn_summary",
    "attn_grid",
    "attn_map",
    "attn_row",
    "attn_layer",
    "attn_head",
    "attn_position",
]
LENS_OUTPUTS = ["lens_status", "lens_summary", "lens_tracks", "lens_top", "lens_candidates", "lens_ids"]
LENS_FROM_STEP_OUTPUTS = [*LENS_OUTPUTS, "lens_text", "hood_views"]
SPEC_OUTPUTS = ["spec_status", "spec_summary", "spec_rounds", "spec_accept", "spec_speed", "spec_checks"]
BATCH_OUTPUTS = ["batch_status", "batch_summary", "batch_throughput", "batch_latency", "batch_table"]
PD_COLUMNS = [
    "prompt tokens",
    "prefill ms",
    "prefill tok/s",
    "decode ms/token",
    "decode tok/s",
    "prefill FLOP/byte",
    "decode FLOP/byte",
    "decode GB/s (est.)",
]
CHECK_COLUMNS = ["round", "drafted", "p (model)", "q (draft)", "test", "result"]
BATCH_COLUMNS = ["#", "prompt", "answer (batch)", "equal to solo", "solo done at (s)", "batch done at (s)"]
TABLE_HEADERS = {"pd_table": PD_COLUMNS, "spec_checks": CHECK_COLUMNS, "batch_table": BATCH_COLUMNS}
GREEN, RED, BLUE = "rgba(44,160,44,0.30)", "rgba(214,39,40,0.30)", "rgba(42,125,225,0.30)"
MAX_SPEC_TOKENS = 256


# --- rendering (plain results in, component values out) ---------------------------------------------


def spans(tokenizer: Any, ids: list[int], colour: str = "", strike: bool = False) -> str:
    """Token pieces as inline spans (visible whitespace), optionally on a coloured background."""
    style = f"background:{colour};" if colour else ""
    style += "text-decoration:line-through;" if strike else ""
    pieces = (html.escape(token_piece(tokenizer, t).visible) for t in ids)
    return "".join(
        f"<span style='{style}border-radius:3px;padding:0 1px;margin:0 1px'>{p}</span>" for p in pieces
    )


def kv_views(lm: Engine, result: cost.KVOnOff, final: bool) -> dict[str, Any]:
    """Figures (redrawn every step) and, at the end, the summary and both continuations."""
    views: dict[str, Any] = {
        "kv_status": (
            f"{'Done' if final else 'Running'}: {result.phase} · prompt {result.prompt_tokens:,} tokens"
        ),
        "kv_latency": plots.step_latency_figure(
            result.cached_prefill_seconds,
            result.recomputed_prefill_seconds,
            result.cached_step_seconds,
            result.recomputed_step_seconds,
        ),
        "kv_cumulative": plots.cumulative_figure(result.cumulative(True), result.cumulative(False)),
        "kv_bytes": plots.cache_bytes_figure(result.cache_lengths, result.cache_bytes, result.formula_bytes),
    }
    if final:
        views["kv_summary"] = kv_summary(result)
        same = "identical ✓" if result.identical else "DIFFERENT ✗"
        views["kv_text"] = (
            f"<p><b>With the cache:</b> {spans(lm.tokenizer, result.cached_ids, BLUE)}</p>"
            f"<p><b>Without:</b> {spans(lm.tokenizer, result.recomputed_ids, BLUE)}</p><p>Tokens: "
            f"<b>{same}</b></p>"
        )
    return views


def kv_summary(result: cost.KVOnOff) -> str:
    per_token = result.formula_bytes[0] // max(result.cache_lengths[0], 1)
    lines = [
        f"**Tokens: {'identical ✓' if result.identical else 'different ✗'}** ({len(result.cached_ids)} "
        "greedy tokens each way).",
        f"Prefill (time to first token): {result.cached_prefill_seconds * 1000:,.0f} ms with the cache, "
        f"{result.recomputed_prefill_seconds * 1000:,.0f} ms without: the same work.",
    ]
    if result.cached_step_seconds:
        cached = statistics.median(result.cached_step_seconds) * 1000
        recomputed = statistics.median(result.recomputed_step_seconds) * 1000
        lines.append(
            f"Median decode step: **{cached:,.1f} ms** with the cache vs **{recomputed:,.0f} ms** without "
            f"(**{result.step_ratio:,.1f}×**)."
        )
    verdict = "exactly the formula ✓" if result.bytes_match else "NOT the formula ✗"
    lines.append(
        f"The cache grew by {per_token:,} bytes per token ({result.dtype}), {verdict} of the KV cache tab: "
        f"{result.cache_bytes[-1]:,} bytes after {result.cache_lengths[-1]:,} tokens."
    )
    return "\n\n".join(lines)


def pd_views(result: cost.PrefillDecode, final: bool) -> dict[str, Any]:
    points = result.points
    lengths = [p.length for p in points]
    views: dict[str, Any] = {
        "pd_status": f"{'Done' if final else 'Running'}: {result.phase}",
        "pd_throughput": plots.throughput_figure(
            lengths,
            [p.prefill_tokens_per_second for p in points],
            [p.decode_tokens_per_second for p in points],
        ),
        "pd_intensity": plots.intensity_figure(
            lengths, [p.prefill.intensity for p in points], [p.decode.intensity for p in points]
        ),
        "pd_table": [pd_row(p) for p in points],
    }
    if final and points:
        views["pd_summary"] = pd_summary(result)
    return views


def pd_row(p: cost.CostPoint) -> list[Any]:
    bandwidth = p.decode.bytes / p.decode_seconds / 1e9
    return [
        p.length,
        round(p.prefill_seconds * 1000, 1),
        round(p.prefill_tokens_per_second, 1),
        round(p.decode_seconds * 1000, 1),
        round(p.decode_tokens_per_second, 2),
        round(p.prefill.intensity, 1),
        round(p.decode.intensity, 2),
        round(bandwidth, 1),
    ]


def pd_summary(result: cost.PrefillDecode) -> str:
    best = max(result.points, key=lambda p: p.prefill_tokens_per_second)
    first = result.points[0]
    weights = result.shape.weight_bytes / 1e6
    return (
        f"Prefill reads up to **{best.prefill_tokens_per_second:,.0f} tok/s** ({best.length:,}-token "
        f"prompt) while decode makes **{first.decode_tokens_per_second:,.1f} tok/s** on {result.device}. "
        f"Each decode step reads all {weights:,.0f} MB of weights to make one token (about "
        f"{first.decode.intensity:.2f} FLOP per byte): its speed is set by memory bandwidth "
        f"(~{first.decode.bytes / first.decode_seconds / 1e9:,.1f} GB/s here). Prefill multiplies the same "
        f"weights by many tokens at once ({best.prefill.intensity:,.0f} FLOP per byte), so it is limited by "
        f"compute; prompts are read in chunks of {result.chunk} tokens."
    )


def attention_views(
    view: AttentionView, layer: int, head: int, position: int, grid: bool = True
) -> dict[str, Any]:
    """The chosen head's triangle, the chosen query's row, the sliders, the summary and (grid) the
    layer × head grid, which only a new text changes."""
    layer = min(max(layer, 1), view.layers)
    head = min(max(head, 1), view.heads)
    position = min(max(position, 0), len(view.ids) - 1)
    sink = view.sink_share()
    matrix = view.maps[layer - 1, head - 1].numpy()
    share = float(sink[layer - 1, head - 1])
    title = f"layer {layer}, head {head}"
    row_title = f"query {position} ({view.tokens[position]}) in layer {layer}, head {head}"
    views: dict[str, Any] = {
        "attn_map": plots.attention_map_figure(matrix, view.tokens, title, share),
        "attn_row": plots.query_row_figure(matrix[position], view.tokens, position, row_title),
        "attn_layer": gr.update(value=layer, maximum=view.layers),
        "attn_head": gr.update(value=head, maximum=view.heads),
        "attn_position": gr.update(value=position, maximum=len(view.ids) - 1),
        "attn_summary": attention_summary(view, layer, head, share),
        "attn_status": (
            f"{len(view.ids)} tokens · {view.layers} layers × {view.heads} heads (eager attention)"
        ),
    }
    if grid:
        views["attn_grid"] = plots.attention_grid_figure(view.thumbnails().numpy(), sink.numpy())
    return views


def attention_summary(view: AttentionView, layer: int, head: int, share: float) -> str:
    uniform = view.uniform_share()
    overall = float(view.sink_share().mean())
    return (
        f"Layer {layer}, head {head} puts **{share:.0%}** of each query's weight on the first token "
        f"({html.escape(view.tokens[0])}) on average; an even spread over the visible keys would put "
        f"{uniform:.0%} there. Over all heads: {overall:.0%}. This **attention sink** is where heads park "
        "their weight when nothing else is worth attending to: softmax has to put it somewhere."
    )


def lens_views(lm: Engine, view: lens.LensView) -> dict[str, Any]:
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
        "lens_status": f"{len(view.ids)} tokens · {layers} layers",
        "lens_summary": summary,
        "lens_tracks": plots.lens_track_figure(tracks, view.settles_at),
        "lens_top": plots.lens_top_figure(view.top),
        "lens_candidates": gr.update(
            choices=[(f"{piece} · #{i}", i) for i, piece in choices.items() if i != chosen.id],
            value=[t.id for t in view.candidates],
        ),
        "lens_ids": view.ids,
    }


def spec_views(lm: Engine, result: speculative.SpeculativeResult, final: bool) -> dict[str, Any]:
    """Status while running; the rounds, figures, table and summary after each round."""
    views: dict[str, Any] = {"spec_status": f"{'Done' if final else 'Running'}: {result.phase}"}
    if not result.rounds:
        return views
    rounds = result.rounds
    times, tokens, total = [], [], 0
    for r in rounds:
        total += len(r.emitted)
        times.append(r.finished_at)
        tokens.append(total)
    views["spec_rounds"] = rounds_html(lm, result)
    views["spec_accept"] = plots.acceptance_figure(
        [len(r.drafted) for r in rounds], [r.accepted for r in rounds], [r.bonus is not None for r in rounds]
    )
    views["spec_speed"] = plots.speed_figure(result.plain_times, times, tokens)
    views["spec_checks"] = check_rows(lm, result)
    if final:
        views["spec_summary"] = spec_summary(result)
    return views


def rounds_html(lm: Engine, result: speculative.SpeculativeResult) -> str:
    rows = []
    for n, r in enumerate(result.rounds, start=1):
        kept = spans(lm.tokenizer, r.drafted[: r.accepted], GREEN)
        rejected = spans(lm.tokenizer, r.drafted[r.accepted :], RED, strike=True)
        bonus = spans(lm.tokenizer, [r.bonus], BLUE) if r.bonus is not None else ""
        rows.append(f"<div><small>round {n}</small> {kept}{rejected} → {bonus}</div>")
    legend = (
        f"<small><span style='background:{GREEN}'>accepted draft</span> · "
        f"<span style='background:{RED};text-decoration:line-through'>rejected draft</span> · "
        f"<span style='background:{BLUE}'>the model's own token (bonus)</span></small>"
    )
    style = "line-height:1.9;font-family:ui-monospace,monospace;font-size:13px"
    return f"{legend}<div style='{style}'>{''.join(rows)}</div>"


def check_rows(lm: Engine, result: speculative.SpeculativeResult) -> list[list[Any]]:
    rows = []
    for n, r in enumerate(result.rounds, start=1):
        for c in r.checks:
            if result.greedy:
                test = "= the model's top token" if c.accepted else "≠ the model's top token"
            else:
                test = f"r = {c.draw:.3f} {'<' if c.accepted else '≥'} min(1, p/q) = {c.threshold:.3f}"
            piece = token_piece(lm.tokenizer, c.token).visible
            rows.append(
                [
                    n,
                    piece,
                    round(c.target_prob, 4),
                    round(c.draft_prob, 4),
                    test,
                    "accepted" if c.accepted else "rejected",
                ]
            )
    return rows


def spec_summary(result: speculative.SpeculativeResult) -> str:
    method = next(label for label, name in METHOD_LABELS.items() if name == result.method)
    depth = f", k = {result.exit_layer} layers" if result.exit_layer else ""
    lines = [
        f"**{method}**{depth}, up to {result.draft_tokens} drafts per round: {len(result.ids)} tokens in "
        f"{len(result.rounds)} rounds ({len(result.rounds)} forwards of the model instead of "
        f"{len(result.ids)}) · "
        f"acceptance **{result.acceptance_rate:.0%}**"
    ]
    if result.plain_tokens_per_second:
        lines.append(
            f"Plain decoding {result.plain_tokens_per_second:,.2f} tok/s vs speculative "
            f"{result.tokens_per_second:,.2f} tok/s: **{result.speedup:,.2f}×** (same run, same machinery)"
        )
    if result.speedup is not None and result.speedup < 1:
        lines.append(
            "Slower here: every round pays for its drafts, and too few were accepted to save forwards. A "
            "draft "
            "pays off when it is much cheaper than the model and usually right (the logit lens shows how "
            "late "
            "this model's layers settle on their answer)."
        )
    if result.identical is not None:
        lines.append(
            "**Identical to plain greedy decoding ✓**"
            if result.identical
            else "**DIFFERENT from plain greedy ✗**"
        )
    else:
        lines.append(
            "Sampled: the tokens differ from a plain run, but follow the model's distribution exactly."
        )
    return "\n\n".join(lines)


def batch_views(
    lm: Engine, result: batching.BatchingResult, labels: list[str], final: bool
) -> dict[str, Any]:
    views: dict[str, Any] = {"batch_status": f"{'Done' if final else 'Running'}: {result.phase}"}
    if not final:
        return views
    views["batch_throughput"] = plots.batch_throughput_figure(
        result.solo_tokens_per_second, result.batch_tokens_per_second, result.size
    )
    views["batch_latency"] = plots.batch_latency_figure(result.solo_finished, result.batch_finished)
    views["batch_table"] = [
        [
            i + 1,
            label,
            decode_ids(lm.tokenizer, ids),
            "✓" if same else "✗",
            round(solo, 2),
            round(done, 2),
        ]
        for i, (label, ids, same, solo, done) in enumerate(
            zip(
                labels,
                result.batch_ids,
                result.same,
                result.solo_finished,
                result.batch_finished,
                strict=True,
            )
        )
    ]
    views["batch_summary"] = (
        f"{result.size} sequences, up to {result.new_tokens} tokens each: one by one "
        f"**{result.solo_tokens_per_second:,.1f} tok/s**, in one batch "
        f"**{result.batch_tokens_per_second:,.1f} "
        f"tok/s** (**{result.throughput_ratio:,.2f}×** the throughput). The last sequence is done after "
        f"{result.solo_finished[-1]:,.1f} s one by one, {max(result.batch_finished):,.1f} s in the batch. "
        + (
            "**Every sequence's tokens equal its solo run ✓**"
            if result.identical
            else "**Some sequences differ ✗**"
        )
    )
    return views


# --- handlers -----------------------------------------------------------------------------------------


class HoodHandlers:
    """Thin handlers: parse the widgets, run a view's module, render by component name."""

    def __init__(
        self, engine: Engine, settings: Settings, workspaces: Workspaces, draft: Engine | None = None
    ) -> None:
        self.engine, self.settings, self.workspaces, self.draft = engine, settings, workspaces, draft
        self._attention: OrderedDict[tuple[str, tuple[int, ...]], AttentionView] = OrderedDict()
        self._lock = threading.Lock()
        self.plot_labels: dict[str, str] = {}  # figure name -> its label on screen (for traces)

    def _remember(
        self, request: gr.Request | None, view: str, views: dict[str, Any], fresh: bool = False
    ) -> dict[str, Any]:
        """Keep what a view shows now in the tab's workspace (its trace is saved from it); fresh: a
        new run replaces the last one, else (another head, another tracked token) it updates it."""
        ws = self.workspaces.get(getattr(request, "session_hash", None))
        with ws.lock:
            shown = {} if fresh else ws.hood_runs.get(view, {})
            ws.hood_runs[view] = {**shown, **views}
        return views

    def hood_trace(self, view: str, request: gr.Request | None = None) -> str:
        """Save what the view shows as a recorded trace (JSON) and offer it for download."""
        ws = self.workspaces.get(getattr(request, "session_hash", None))
        with ws.lock:
            shown = dict(ws.hood_runs.get(view, {}))
        if not shown:
            raise PlaygroundError("Run this view first: there is nothing to save yet.")
        data = {"view": view, "outputs": record_views(shown, self.plot_labels, TABLE_HEADERS)}
        status = str(shown.get(f"{view}_status", "")).removeprefix("Done: ")
        title = f"{VIEW_TITLES[view]}: {status}"[:100]
        folder = Path(tempfile.mkdtemp(prefix="trace-"))
        return str(save_trace(new_trace("hood", title, self.engine, data), folder))

    @contextmanager
    def _running(self, request: gr.Request | None, view: str) -> Iterator[Control]:
        """A fresh Control for this tab's run of a view while it runs (Stop cancels it: the model
        stops within one step), forgotten when the run ends."""
        ws, control = self.workspaces.get(getattr(request, "session_hash", None)), Control()
        with ws.lock:
            ws.running[view] = control
        try:
            yield control
        finally:
            with ws.lock:
                if ws.running.get(view) is control:
                    del ws.running[view]

    def stop(self, view: str, request: gr.Request | None) -> None:
        """Cancel this tab's running request of a view, if any."""
        ws = self.workspaces.get(getattr(request, "session_hash", None))
        with ws.lock:
            control = ws.running.pop(view, None)
        if control is not None:
            control.cancel()

    def hood_kv(
        self, kv_length: float, kv_tokens: float, request: gr.Request = None
    ) -> Iterator[dict[str, Any]]:
        """KV cache on vs off: the same greedy continuation both ways, redrawn after every token."""
        length = as_whole(kv_length, "prompt length")
        ids = cost.preset_ids(self.engine.tokenizer, whole_in_range(length, 16, 4000, "Prompt length"))
        result, tokens = None, as_whole(kv_tokens, "new tokens")
        with self._running(request, "kv") as control:
            for result in cost.iter_kv_on_off(self.engine, ids, tokens, control):
                yield kv_views(self.engine, result, final=False)
        yield self._remember(request, "kv", kv_views(self.engine, result, final=True), fresh=True)

    def hood_prefill(
        self, pd_lengths: list[Any], pd_decode: float, request: gr.Request = None
    ) -> Iterator[dict[str, Any]]:
        """Prefill vs decode tokens/s at each chosen prompt length, with the estimated intensity."""
        lengths = [as_whole(n, "prompt length") for n in pd_lengths or []]
        result, decode = None, as_whole(pd_decode, "decode steps")
        with self._running(request, "pd") as control:
            for result in cost.iter_prefill_vs_decode(self.engine, lengths, decode, control):
                yield pd_views(result, final=False)
        yield self._remember(request, "pd", pd_views(result, final=True), fresh=True)

    def hood_attention(
        self, attn_text: str, attn_layer: float, attn_head: float, request: gr.Request = None
    ) -> dict[str, Any]:
        """Read the text with eager attention; show the grid, one head's triangle and one query's row."""
        view = self._attention_view(attn_text, request)
        position = len(view.ids) - 1  # a new text starts at its last token: the widest row
        views = attention_views(view, as_whole(attn_layer, "layer"), as_whole(attn_head, "head"), position)
        return self._remember(request, "attn", views, fresh=True)

    def hood_attention_focus(
        self,
        attn_text: str,
        attn_layer: float,
        attn_head: float,
        attn_position: float,
        request: gr.Request = None,
    ) -> dict[str, Any]:
        """Another layer, head or query position of the same text (its weights are kept)."""
        view = self._attention_view(attn_text, request)
        layer, head = as_whole(attn_layer, "layer"), as_whole(attn_head, "head")
        views = attention_views(view, layer, head, as_whole(attn_position, "position"))
        return self._remember(request, "attn", views)

    def hood_attention_cell(
        self, attn_cell: str, attn_text: str, attn_position: float, request: gr.Request = None
    ) -> dict[str, Any]:
        """A click on a thumbnail of the grid ("layer,head:stamp") enlarges that head."""
        try:
            layer, head = (int(x) for x in str(attn_cell).split(":")[0].split(","))
        except ValueError:
            raise PlaygroundError(f"Not a grid cell: {attn_cell!r} (expected 'layer,head').") from None
        view = self._attention_view(attn_text, request)
        views = attention_views(view, layer, head, as_whole(attn_position, "position"), grid=False)
        return self._remember(request, "attn", views)

    def hood_lens(
        self, lens_text: str, lens_chat: bool, lens_candidates: list[Any], request: gr.Request = None
    ) -> dict[str, Any]:
        """The logit lens for the token after the text (chat: wrapped as a user turn, answer next)."""
        ids = encode_prompt(self.engine.tokenizer, lens_text or "", bool(lens_chat))
        views = lens_views(self.engine, lens.lens_view(self.engine, ids, _ids(lens_candidates)))
        return self._remember(request, "lens", views, fresh=True)

    def hood_lens_candidates(
        self, lens_ids: list[int], lens_candidates: list[Any], request: gr.Request = None
    ) -> dict[str, Any]:
        """Track the chosen candidate tokens too (the prefix of the last run)."""
        if not lens_ids:
            raise PlaygroundError("Run the lens first: there is no prefix yet.")
        views = lens_views(self.engine, lens.lens_view(self.engine, lens_ids, _ids(lens_candidates)))
        return self._remember(request, "lens", views)

    def hood_lens_pick(
        self, lens_pick: str, lens_ids: list[int], lens_candidates: list[Any], request: gr.Request = None
    ) -> dict[str, Any]:
        """A click on a token of the top-tokens chart ("id:stamp") adds it to the tracked tokens."""
        token = as_whole(str(lens_pick).split(":")[0], "token id")
        return self.hood_lens_candidates(lens_ids, [*_ids(lens_candidates), token], request)

    def lens_for_step(self, request: gr.Request = None) -> dict[str, Any]:
        """The logit lens at the Step tab's current step (its prompt and the tokens picked so far)."""
        session = self.workspaces.get(getattr(request, "session_hash", None)).step
        if session is None:
            raise PlaygroundError("No step-by-step session yet: start one in the Step by step tab.")
        with session.locked():
            ids = list(session.ids)
        views = lens_views(self.engine, lens.lens_view(self.engine, ids))
        views["lens_status"] = f"From the Step tab: {views['lens_status']}"
        self._remember(request, "lens", views, fresh=True)
        return {
            **views,
            "lens_text": decode_ids(self.engine.tokenizer, ids),
            "hood_views": gr.Tabs(selected="hood-lens"),
        }

    def hood_speculative(
        self,
        spec_prompt: str,
        spec_chat: bool,
        spec_method: str,
        spec_k: float,
        spec_exit: float,
        spec_tokens: float,
        spec_temperature: float,
        spec_seed: Any,
        request: gr.Request = None,
    ) -> Iterator[dict[str, Any]]:
        """Plain decoding, then speculative decoding of the same prompt in the same run."""
        ids = encode_prompt(self.engine.tokenizer, spec_prompt or "", bool(spec_chat))
        method = METHOD_LABELS.get(spec_method, spec_method)
        temperature = as_number(spec_temperature, "temperature")
        seed = parse_seed(spec_seed)
        options = {
            "draft_tokens": as_whole(spec_k, "draft length"),
            "exit_layer": as_whole(spec_exit, "exit layer k") if method == "early_exit" else None,
            "draft": self.draft,
            "settings": SamplingSettings(temperature=temperature),
            "seed": 0 if seed is None else seed,
        }
        result, tokens = None, as_whole(spec_tokens, "new tokens")
        with self._running(request, "spec") as control:
            steps = speculative.iter_speculative(
                self.engine, ids, tokens, method, compare=True, control=control, **options
            )
            for result in steps:
                yield spec_views(self.engine, result, final=False)
        yield self._remember(request, "spec", spec_views(self.engine, result, final=True), fresh=True)

    def hood_batching(
        self,
        batch_prompts: str,
        batch_n: float,
        batch_tokens: float,
        batch_chat: bool,
        request: gr.Request = None,
    ) -> Iterator[dict[str, Any]]:
        """The first N prompts one by one, then together in one padded batch."""
        n = as_whole(batch_n, "number of prompts")
        lines = [line.strip() for line in (batch_prompts or "").splitlines() if line.strip()]
        if len(lines) < n:
            raise PlaygroundError(f"{n} prompts asked for but only {len(lines)} given: one prompt per line.")
        prompts = [encode_prompt(self.engine.tokenizer, line, bool(batch_chat)) for line in lines[:n]]
        result, tokens = None, as_whole(batch_tokens, "new tokens")
        with self._running(request, "batch") as control:
            for result in batching.iter_batching(self.engine, prompts, tokens, control=control):
                yield batch_views(self.engine, result, lines[:n], final=False)
        yield self._remember(
            request, "batch", batch_views(self.engine, result, lines[:n], final=True), fresh=True
        )

    def _attention_view(self, text: str, request: gr.Request | None) -> AttentionView:
        """This tab's attention for the text: kept for the last few (tab, text) pairs, so moving a
        slider or clicking a thumbnail does not run the model again."""
        ids = encode_text(self.engine.tokenizer, text or "")
        key = (getattr(request, "session_hash", None) or "", tuple(ids))
        with self._lock:
            if key in self._attention:
                self._attention.move_to_end(key)
                return self._attention[key]
        view = attention_view(self.engine, ids)
        with self._lock:
            self._attention[key] = view
            while len(self._attention) > 4:
                self._attention.popitem(last=False)
        return view


def _ids(values: list[Any] | None) -> list[int]:
    return [as_whole(v, "token id") for v in values or []]


# --- layout and wiring --------------------------------------------------------------------------------

EXPLAIN = {
    "kv": (
        "Each new token needs the keys and values of every earlier token. With a **KV cache** they are kept, "
        "so a step reads one new token: flat. Without it, every step recomputes the whole prefix: the step "
        "grows with the text and the total grows quadratically. Same model, same tokens, measured now."
    ),
    "pd": (
        "**Prefill** reads the whole prompt in one pass: every weight is used for many tokens, so it runs at "
        "compute speed and sets the time to first token. **Decode** makes one token per pass and must read "
        "every weight for it: its speed is set by memory bandwidth, whatever the prompt."
    ),
    "attn": (
        "Each token (a *query*) takes a weighted average over the tokens before it (the *keys*); the "
        "**causal mask** gives every later token weight 0, so a token never sees the future. Click a "
        f"thumbnail to enlarge its head. Eager attention is used for this view only, at most {MAX_TOKENS} "
        "tokens."
    ),
    "lens": (
        "The **logit lens** asks what the model would say if it stopped after layer *i*: the final norm and "
        "the LM head applied to that layer's hidden state. Watch where the answer appears and where it "
        "settles. Click a token in the chart, or pick candidates, to follow them."
    ),
    "spec": (
        "**Speculative decoding** drafts a few tokens cheaply, then the model checks them all in **one** "
        "forward: each draft is kept while it matches what the model would have produced, then the model "
        "adds its own next token. Greedy output stays exactly the same; with sampling, the min(1, p/q) test "
        "keeps the distribution exact. Speed comes from fewer forwards of the big model."
    ),
    "batch": (
        "Decoding is memory-bound, so one forward can serve many sequences for nearly the price of one: the "
        "same weight reads produce N tokens. Servers go further with **continuous batching**: a finished "
        "sequence leaves the batch at the next step and a waiting request takes its place, so no slot idles."
    ),
}


def _model_dims(engine: Engine) -> tuple[int, int]:
    """(layers, heads) for the sliders; a remote engine without a config gets placeholders."""
    config = getattr(engine, "config", None)
    text = config.get_text_config() if config is not None else None
    return int(getattr(text, "num_hidden_layers", 32)), int(getattr(text, "num_attention_heads", 32))


def _run_row(w: dict[str, Any], name: str, label: str) -> None:
    with gr.Row():
        w[f"{name}_run"] = gr.Button(label, variant="primary", scale=2, elem_id=f"hood-{name}-run")
        w[f"{name}_stop"] = gr.Button("Stop", scale=1, elem_id=f"hood-{name}-stop")
        w[f"{name}_save"] = gr.Button("Save trace (JSON)", scale=1, elem_id=f"hood-{name}-save")
    w[f"{name}_trace_file"] = gr.File(label="recorded trace", interactive=False, visible=False)
    w[f"{name}_status"] = gr.Markdown("", elem_id=f"hood-{name}-status")
    w[f"{name}_summary"] = gr.Markdown("", elem_id=f"hood-{name}-summary")


def _kv_view(w: dict[str, Any]) -> None:
    gr.Markdown(EXPLAIN["kv"])
    with gr.Row():
        info = "Tokens of a preset English text read first (longer: a bigger gap)"
        w["kv_length"] = gr.Slider(
            16, 2000, value=400, step=1, label="prompt length (tokens)", info=info, elem_id="hood-kv-length"
        )
        w["kv_tokens"] = gr.Slider(
            2,
            64,
            value=12,
            step=1,
            label="new tokens",
            info="Greedy tokens generated each way",
            elem_id="hood-kv-tokens",
        )
    _run_row(w, "kv", "Run: cache on vs off")
    w["kv_latency"] = gr.Plot(
        label="time per token: prefill apart, then each decode step", elem_id="hood-kv-latency"
    )
    with gr.Row():
        w["kv_cumulative"] = gr.Plot(label="cumulative time")
        w["kv_bytes"] = gr.Plot(label="KV cache bytes: measured vs the formula")
    w["kv_text"] = gr.HTML(elem_id="hood-kv-text")


def _pd_view(w: dict[str, Any]) -> None:
    gr.Markdown(EXPLAIN["pd"])
    with gr.Row():
        info = "Each length: one prefill, then a few decode steps after it"
        w["pd_lengths"] = gr.CheckboxGroup(
            PD_LENGTHS,
            value=[16, 64, 256, 1024, 4096],
            label="prompt lengths",
            info=info,
            elem_id="hood-pd-lengths",
        )
        w["pd_decode"] = gr.Slider(
            2,
            32,
            value=6,
            step=1,
            label="decode steps per length",
            info="Timed; the median is shown",
            elem_id="hood-pd-decode",
        )
    _run_row(w, "pd", "Run: prefill vs decode")
    with gr.Row():
        w["pd_throughput"] = gr.Plot(label="tokens per second")
        w["pd_intensity"] = gr.Plot(label="arithmetic intensity (FLOPs per byte moved, estimated)")
    w["pd_table"] = gr.Dataframe(headers=PD_COLUMNS, label="measurements", interactive=False)


def _attention_view(w: dict[str, Any], layers: int, heads: int) -> None:
    gr.Markdown(EXPLAIN["attn"])
    w["attn_text"] = gr.Textbox(ATTENTION_TEXT, label="text", lines=2, info=f"At most {MAX_TOKENS} tokens")
    _run_row(w, "attn", "Run: read the attention")
    w["attn_grid"] = gr.Plot(label="every layer × head (click one to enlarge it)", elem_id="hood-attn-grid")
    w["attn_cell"] = gr.Textbox(visible="hidden", elem_id="hood-attn-cell", label="clicked cell")
    with gr.Row():
        w["attn_layer"] = gr.Slider(1, layers, value=max(1, layers // 2), step=1, label="layer")
        w["attn_head"] = gr.Slider(1, heads, value=1, step=1, label="head")
        w["attn_position"] = gr.Slider(
            0, 1, value=0, step=1, label="query position", info="Whose attention row to show"
        )
    with gr.Row():
        w["attn_map"] = gr.Plot(label="the causal triangle of this head", elem_id="hood-attn-map")
        w["attn_row"] = gr.Plot(label="one query over every key", elem_id="hood-attn-row")


def _lens_view(w: dict[str, Any]) -> None:
    gr.Markdown(EXPLAIN["lens"])
    with gr.Row():
        w["lens_text"] = gr.Textbox(
            LENS_TEXT, label="prefix", lines=2, scale=4, info="The lens looks at the next token"
        )
        w["lens_chat"] = gr.Checkbox(
            False, label="chat", info="Wrap as a user turn: the answer's first token is next"
        )
    _run_row(w, "lens", "Run: logit lens")
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


def _spec_view(w: dict[str, Any], layers: int, has_draft: bool) -> None:
    gr.Markdown(EXPLAIN["spec"])
    first = next(iter(SPEC_PRESETS))
    with gr.Row():
        w["spec_preset"] = gr.Dropdown(list(SPEC_PRESETS), value=first, label="preset", scale=2)
        w["spec_chat"] = gr.Checkbox(True, label="chat", info="Wrap the prompt as a user turn")
    w["spec_prompt"] = gr.Textbox(SPEC_PRESETS[first], label="prompt", lines=4)
    draft_note = "" if has_draft else " (start the app with --draft-model to use one)"
    with gr.Row():
        w["spec_method"] = gr.Radio(
            list(METHOD_LABELS),
            value=next(iter(METHOD_LABELS)),
            label="draft source" + draft_note,
            elem_id="hood-spec-method",
        )
        w["spec_k"] = gr.Slider(
            1, speculative.MAX_DRAFT, value=6, step=1, label="draft length", info="Tokens drafted per round"
        )
        w["spec_exit"] = gr.Slider(
            1,
            max(2, layers - 1),  # Gradio refuses minimum == maximum (a 2-layer model: 1 is the real choice)
            value=max(1, layers * 3 // 4),
            step=1,
            label="early exit: k layers",
            info="The draft: the first k layers + final norm + head",
        )
    with gr.Row():
        w["spec_tokens"] = gr.Slider(
            8, MAX_SPEC_TOKENS, value=64, step=1, label="new tokens", elem_id="hood-spec-tokens"
        )
        w["spec_temperature"] = gr.Slider(
            0, 1.5, value=0, step=0.05, label="temperature", info="0 = greedy (exact match test)"
        )
        w["spec_seed"] = gr.Textbox("0", label="seed", info="For sampling and the accept draws")
    _run_row(w, "spec", "Run: plain, then speculative")
    w["spec_rounds"] = gr.HTML(elem_id="hood-spec-rounds")
    with gr.Row():
        w["spec_accept"] = gr.Plot(label="each round: accepted, rejected, bonus")
        w["spec_speed"] = gr.Plot(label="tokens out over time")
    w["spec_checks"] = gr.Dataframe(
        headers=CHECK_COLUMNS, label="every accept test", interactive=False, max_height=320
    )


def _batch_view(w: dict[str, Any]) -> None:
    gr.Markdown(EXPLAIN["batch"])
    with gr.Row():
        w["batch_n"] = gr.Slider(
            1, batching.MAX_BATCH, value=8, step=1, label="prompts (N)", elem_id="hood-batch-n"
        )
        w["batch_tokens"] = gr.Slider(
            4, 128, value=16, step=1, label="new tokens each", elem_id="hood-batch-tokens"
        )
        w["batch_chat"] = gr.Checkbox(True, label="chat", info="Wrap each prompt as a user turn")
    w["batch_prompts"] = gr.Textbox(
        BATCH_PROMPTS, label="prompts, one per line (the first N are used)", lines=4, max_lines=8
    )
    _run_row(w, "batch", "Run: one by one vs one batch")
    with gr.Row():
        w["batch_throughput"] = gr.Plot(label="throughput")
        w["batch_latency"] = gr.Plot(label="when each sequence was done")
    w["batch_table"] = gr.Dataframe(
        headers=BATCH_COLUMNS, label="sequences", interactive=False, wrap=True, max_height=360
    )


def _spec_preset(spec_preset: str) -> dict[str, Any]:
    """A preset's prompt into the prompt box (no model)."""
    return {"spec_prompt": SPEC_PRESETS.get(spec_preset, "")}


def _stop_handler(h: HoodHandlers, view: str) -> Any:
    def stop(request: gr.Request) -> None:
        h.stop(view, request)

    stop.__name__ = f"hood_stop_{view}"
    return stop


def _trace_handler(h: HoodHandlers, view: str) -> Any:
    def save(request: gr.Request) -> dict[str, Any]:
        return {f"{view}_trace_file": gr.File(h.hood_trace(view, request), visible=True)}

    save.__name__ = f"hood_trace_{view}"
    return save


def _wire(h: HoodHandlers, w: dict[str, Any]) -> None:
    """Run buttons (streaming into each view's status line), Stop buttons, clicks and sliders."""
    runs = [
        ("kv", h.hood_kv, KV_OUTPUTS, "hood_kv_on_off", []),
        ("pd", h.hood_prefill, PD_OUTPUTS, "hood_prefill_decode", []),
        ("attn", h.hood_attention, ATTN_OUTPUTS, "hood_attention", [w["attn_text"].submit]),
        ("lens", h.hood_lens, LENS_OUTPUTS, "hood_lens", [w["lens_text"].submit]),
        ("spec", h.hood_speculative, SPEC_OUTPUTS, "hood_speculative", []),
        ("batch", h.hood_batching, BATCH_OUTPUTS, "hood_batching", []),
    ]
    for name, fn, outputs, api_name, more in runs:
        event = connect(
            [w[f"{name}_run"].click, *more], fn, w, outputs, api_name=api_name, status=f"{name}_status"
        )
        stop = _stop_handler(h, name)
        w[f"{name}_stop"].click(stop, None, None, cancels=[event], api_visibility="private", queue=False)
        connect(
            w[f"{name}_save"].click, _trace_handler(h, name), w, [f"{name}_trace_file"],
            api_name=f"hood_{name}_trace", status=f"{name}_status", model=False,
        )  # fmt: skip
    on = {"status": "attn_status", "trigger_mode": "always_last"}
    focus = [w["attn_layer"].release, w["attn_head"].release, w["attn_position"].release]
    connect(focus, h.hood_attention_focus, w, ATTN_FOCUS_OUTPUTS, api_name="hood_attention_focus", **on)
    connect(w["attn_cell"].change, h.hood_attention_cell, w, ATTN_FOCUS_OUTPUTS, api_name=None, **on)
    on = {"status": "lens_status", "trigger_mode": "always_last"}
    connect(
        w["lens_candidates"].input,
        h.hood_lens_candidates,
        w,
        LENS_OUTPUTS,
        api_name="hood_lens_candidates",
        **on,
    )
    connect(w["lens_pick"].change, h.hood_lens_pick, w, LENS_OUTPUTS, api_name=None, **on)
    connect(w["spec_preset"].input, _spec_preset, w, ["spec_prompt"], api_name=None, model=False)


def build_hood_tab(
    engine: Engine, settings: Settings, workspaces: Workspaces, draft: Engine | None = None
) -> tuple[dict[str, Any], HoodHandlers]:
    """The "Under the hood" tab (call inside a gr.Tab): one sub-tab per lesson. Returns its
    components by name and its handlers (`lens_for_step` opens the lens at the Step tab's step).
    draft: a second engine with the same tokenizer for speculative decoding (--draft-model)."""
    h = HoodHandlers(engine, settings, workspaces, draft)
    w: dict[str, Any] = {}
    layers, heads = _model_dims(engine)
    if not engine.capabilities.probes:
        gr.Markdown(
            f"These views need a model running in this process: {engine.capabilities.why_not('probes')}"
        )
    with gr.Tabs(elem_id="hood-views") as w["hood_views"]:
        with gr.Tab("Cache on vs off", id="hood-kv"):
            _kv_view(w)
        with gr.Tab("Prefill vs decode", id="hood-pd"):
            _pd_view(w)
        with gr.Tab("Attention", id="hood-attn"):
            _attention_view(w, layers, heads)
        with gr.Tab("Logit lens", id="hood-lens"):
            _lens_view(w)
        with gr.Tab("Speculative decoding", id="hood-spec"):
            _spec_view(w, layers, draft is not None)
        with gr.Tab("Batching", id="hood-batch"):
            _batch_view(w)
    h.plot_labels = {name: str(c.label or "") for name, c in w.items() if isinstance(c, gr.Plot)}
    _wire(h, w)
    return w, h
