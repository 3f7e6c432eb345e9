"""The KV tab's text: the summary, the formula with its sources, the per-layer rows, and what a
measurement or a serving engine's own figures say. Pure formatting: numbers in, Markdown out."""

from __future__ import annotations

from typing import Any

from playground import kv as kvm
from playground.engine.base import Engine
from playground.kv.measure import Measurement


def summary_markdown(b: kvm.KVBreakdown, params: int, source: str, wdtype: str, fit: kvm.FitResult) -> str:
    """Totals in GiB and GB, weights, and the solver's answer with its overhead stated."""
    g, per_token = fit.gpu_bytes, b.total_bytes / (b.seq_len * b.batch_size)
    verdict = "✅ fits" if fit.fits else "❌ does not fit"
    batch_text = "unbounded" if fit.max_batch is None else f"{fit.max_batch:,}"
    size = f"{g / kvm.GB:,.2f}".rstrip("0").rstrip(".")  # 80, 12.5: as typed
    lines = [
        f"### KV cache: **{b.total_bytes:,} bytes** = **{b.gib:,.3f} GiB** (2^30 B) "
        f"= **{b.gb:,.3f} GB** (10^9 B)",
        f"{b.seq_len:,} tokens × batch {b.batch_size} · KV dtype {b.dtype.name} ({b.dtype.note}) · "
        f"mode *{b.geometry.mode}* · per token and sequence: {per_token:,.0f} B",
        f"**Weights:** {params / 1e9:,.3f} B parameters ({source}) in {wdtype} "
        f"= {kvm.format_bytes(fit.weights_bytes)}",
        f"**On {article(g / kvm.GB)} {size} GB GPU** ({g / kvm.GIB:,.1f} GiB): {verdict}. "
        "Overhead reserve "
        f"{kvm.format_bytes(fit.overhead_bytes)} ({fit.overhead_bytes / g:.0%} of the GPU, for activations, "
        f"CUDA context, fragmentation) leaves {kvm.format_bytes(max(fit.free_for_kv, 0))} for the KV cache.",
        f"- longest context at batch {b.batch_size}: {_max_len_text(fit)}",
        f"- largest batch at {b.seq_len:,} tokens: **{batch_text}**",
    ]
    if fit.context_limit is not None and b.seq_len > fit.context_limit:
        limit = f"{fit.context_limit:,} (`max_position_embeddings`)"
        lines.append(f"- ⚠️ {b.seq_len:,} tokens is past this model's own context limit of {limit}.")
    if fit.free_for_kv < 0:
        lines.append("- ⚠️ the weights and the reserve alone exceed the GPU's memory.")
    return "\n\n".join(lines[:4]) + "\n\n" + "\n".join(lines[4:])


def article(number: float) -> str:
    """'an' before a number read with a vowel sound (8, 11, 18, 80-89, 800...), else 'a'."""
    digits = f"{number:.0f}"
    eleven_or_eighteen = len(digits) % 3 == 2 and digits[:2] in ("11", "18")  # 11, 18 000, 11 000 000...
    return "an" if digits.startswith("8") or eleven_or_eighteen else "a"


def _max_len_text(fit: kvm.FitResult) -> str:
    """Memory's answer, capped at the model's own context limit (and saying so)."""
    if fit.max_seq_len is None:
        memory = "any length (every cached layer is windowed, so the cache stops growing)"
    elif fit.max_seq_len >= kvm.MAX_TOKENS:
        memory = f"more than {kvm.MAX_TOKENS:,} tokens"
    else:
        memory = f"{fit.max_seq_len:,} tokens"
    limit = fit.context_limit
    if limit is None or (fit.max_seq_len is not None and fit.max_seq_len <= limit):
        return f"**{memory}**"
    return f"**{limit:,} tokens**, the model's own limit (`max_position_embeddings`; memory alone: {memory})"


def formula_markdown(b: kvm.KVBreakdown) -> str:
    """The formula with numbers substituted, then which config key each number came from."""
    parts = ["#### Formula", *[f"- `{line}`" for line in kvm.formula_lines(b)]]
    parts.append(f"- **total = {b.total_bytes:,} bytes**")
    parts += [
        "#### Where the numbers come from",
        *[f"- {q} = **{v}** ← `{s}`" for q, v, s in b.geometry.sources],
    ]
    parts += [f"> {note}" for note in b.geometry.notes]
    return "\n".join(parts)


def layer_rows(b: kvm.KVBreakdown) -> list[list[Any]]:
    """One row per layer; token counts and bytes with thousands separators."""
    return [
        [x.index, x.kind, x.kv_heads, x.k_dim, x.v_dim, f"{x.tokens:,}", f"{x.bytes:,}"] for x in b.layers
    ]


def server_kv_text(lm: Engine) -> str:
    """A serving engine's own KV capacity and usage, next to the calculator's bytes for that many
    tokens of the served config (wording to be settled by the UI rework)."""
    figures = lm.kv_figures()
    if figures is None:
        return f"**{lm.capabilities.why_not('cache_bytes')}**, and {lm.kind} does not report KV figures here."
    config = lm.config
    used = "usage not reported"
    if figures.used_tokens is not None:
        used = f"{figures.used_tokens:,} tokens in use"
    if figures.usage is not None:
        used += f" ({figures.usage:.1%})"
    text = f"### {lm.kind}'s own KV cache: {figures.capacity_tokens:,} tokens · {used}\n\n"
    text += f"From {figures.source}"
    if figures.block_size and figures.num_blocks:
        text += f": {figures.num_blocks:,} blocks × {figures.block_size} tokens"
    if config is None:
        return text + ". The served model's config is not available here, so there is no prediction."
    c = kvm.compare_server_kv(figures, config)
    reported = ""
    if c.reported_bytes:
        reported = f"; the engine reports {kvm.format_bytes(c.reported_bytes)} per GPU"
    return text + (
        f".\n\nPredicted by the calculator for the served config ({c.dtype_note}): {c.bytes_per_token:,} B "
        f"per token, so {c.capacity_tokens:,} tokens take **{kvm.format_bytes(c.predicted_bytes)}**"
        f"{reported}."
    )


def measured_text(lm: Engine, n: int, m: Measurement) -> str:
    """A real cache's bytes next to the formula's, and how both were counted."""
    verdict = "✅ equal to the byte" if m.equal else "❌ they differ"
    return (
        f"### Measured {m.measured_bytes:,} bytes · predicted {m.predicted.total_bytes:,} bytes: "
        f"{verdict}\n\n"
        f"A forward pass of {lm.name} (loaded in {model_dtype_name(lm)}) over {n:,} synthetic tokens "
        f"(batch 1) filled the engine's KV cache, whose keys and values are {m.dtype}, the model's own "
        "dtype; "
        f"measured = Σ numel × element_size over them ({len(m.measured_layers)} layers). "
        f"Predicted = `kv_cache_bytes(config, {n}, 1, {m.dtype!r}, 'transformers')` = "
        f"{kvm.format_bytes(m.predicted.total_bytes)}, in that same dtype: the KV dtype chosen above "
        "does not apply to this real cache."
    )


def model_dtype_name(lm: Engine) -> str:
    """The loaded model's dtype as the calculator names it: torch.float32 -> "float32" (a serving
    engine's weights format is not known here: bfloat16, how most checkpoints are published)."""
    return str(lm.dtype).removeprefix("torch.") if lm.dtype is not None else "bfloat16"
