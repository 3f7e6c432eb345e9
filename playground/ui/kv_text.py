"""The KV tab's text: the summary, the formula with its sources, the per-layer rows, and what a
measurement or a serving engine's own figures say. Pure formatting: numbers in, Markdown out, in
the language asked for (playground/ui/i18n)."""

from __future__ import annotations

from typing import Any

from playground import kv as kvm
from playground.engine.base import Engine
from playground.kv.geometry import KIND_NAMES
from playground.kv.measure import Measurement
from playground.ui.i18n import localize, t

MODE_NAMES = {"ideal": "kv.mode.ideal", "transformers": "kv.mode.transformers"}


def summary_markdown(
    b: kvm.KVBreakdown, params: int, source: str, wdtype: str, fit: kvm.FitResult, lang: str = "en"
) -> str:
    """Totals in GiB and GB, weights, and the solver's answer with its overhead stated."""
    per_token = b.total_bytes / (b.seq_len * b.batch_size)
    batch_text = t("kv.sum.unbounded", lang) if fit.max_batch is None else f"{fit.max_batch:,}"
    lines = [
        t("kv.sum.total", lang, bytes=b.total_bytes, gib=b.gib, gb=b.gb),
        t(
            "kv.sum.inputs",
            lang,
            tokens=b.seq_len,
            batch=b.batch_size,
            dtype=b.dtype.name,
            note=localize(b.dtype.note, lang),
            mode=t(MODE_NAMES[b.geometry.mode], lang),
            per_token=per_token,
        ),
        t(
            "kv.sum.weights",
            lang,
            billions=params / 1e9,
            source=source,
            dtype=wdtype,
            size=kvm.format_bytes(fit.weights_bytes),
        ),
        _gpu_line(fit, lang),
        t("kv.sum.longest", lang, batch=b.batch_size, longest=_max_len_text(fit, lang)),
        t("kv.sum.largest", lang, tokens=b.seq_len, largest=batch_text),
    ]
    if fit.context_limit is not None and b.seq_len > fit.context_limit:
        lines.append(t("kv.sum.past_limit", lang, tokens=b.seq_len, limit=fit.context_limit))
    if fit.free_for_kv < 0:
        lines.append(t("kv.sum.weights_exceed", lang))
    return "\n\n".join(lines[:4]) + "\n\n" + "\n".join(lines[4:])


def _gpu_line(fit: kvm.FitResult, lang: str) -> str:
    """The GPU's size, whether it all fits, and what the overhead reserve leaves for the cache."""
    g = fit.gpu_bytes
    return t(
        "kv.sum.gpu",
        lang,
        article=article(g / kvm.GB),
        size=f"{g / kvm.GB:,.2f}".rstrip("0").rstrip("."),  # 80, 12.5: as typed
        gib=g / kvm.GIB,
        verdict=t("kv.sum.fits" if fit.fits else "kv.sum.does_not_fit", lang),
        reserve=kvm.format_bytes(fit.overhead_bytes),
        share=fit.overhead_bytes / g,
        free=kvm.format_bytes(max(fit.free_for_kv, 0)),
    )


def article(number: float) -> str:
    """'an' before a number read with a vowel sound (8, 11, 18, 80-89, 800...), else 'a'."""
    digits = f"{number:.0f}"
    eleven_or_eighteen = len(digits) % 3 == 2 and digits[:2] in ("11", "18")  # 11, 18 000, 11 000 000...
    return "an" if digits.startswith("8") or eleven_or_eighteen else "a"


def _max_len_text(fit: kvm.FitResult, lang: str) -> str:
    """Memory's answer, capped at the model's own context limit (and saying so)."""
    if fit.max_seq_len is None:
        memory = t("kv.sum.any_length", lang)
    elif fit.max_seq_len >= kvm.MAX_TOKENS:
        memory = t("kv.sum.more_than", lang, tokens=kvm.MAX_TOKENS)
    else:
        memory = t("kv.sum.tokens", lang, tokens=fit.max_seq_len)
    limit = fit.context_limit
    if limit is None or (fit.max_seq_len is not None and fit.max_seq_len <= limit):
        return f"**{memory}**"
    return t("kv.sum.own_limit", lang, limit=limit, memory=memory)


def formula_markdown(b: kvm.KVBreakdown, lang: str = "en") -> str:
    """The formula with numbers substituted, then which config key each number came from."""
    parts = [t("kv.formula.title", lang), *[f"- `{localize(line, lang)}`" for line in kvm.formula_lines(b)]]
    parts.append(t("kv.formula.total", lang, bytes=b.total_bytes))
    parts += [
        t("kv.formula.sources", lang),
        *[
            f"- {localize(q, lang)} = **{localize(v, lang)}** ← `{localize(s, lang)}`"
            for q, v, s in b.geometry.sources
        ],
    ]
    parts += [f"> {localize(note, lang)}" for note in b.geometry.notes]
    return "\n".join(parts)


def layer_rows(b: kvm.KVBreakdown, lang: str = "en") -> list[list[Any]]:
    """One row per layer; token counts and bytes with thousands separators."""
    return [
        [x.index, kind_name(x.kind, lang), x.kv_heads, x.k_dim, x.v_dim, f"{x.tokens:,}", f"{x.bytes:,}"]
        for x in b.layers
    ]


def kind_name(kind: str, lang: str) -> str:
    """A layer kind ("sliding") as the language says it."""
    return localize(KIND_NAMES.get(kind, kind), lang)


def server_kv_text(lm: Engine, lang: str = "en") -> str:
    """A serving engine's own KV capacity and usage, next to the calculator's bytes for that many
    tokens of the served config."""
    figures = lm.kv_figures()
    if figures is None:
        why = localize(lm.capabilities.why_not("cache_bytes"), lang)
        return t("kv.server.none", lang, why=why, kind=lm.kind)
    used = t("kv.server.usage_unknown", lang)
    if figures.used_tokens is not None:
        used = t("kv.server.used", lang, tokens=figures.used_tokens)
    if figures.usage is not None:
        used += f" ({figures.usage:.1%})"
    text = t("kv.server.title", lang, kind=lm.kind, tokens=figures.capacity_tokens, used=used)
    text += t("kv.server.from", lang, source=figures.source)
    if figures.block_size and figures.num_blocks:
        text += t("kv.server.blocks", lang, blocks=figures.num_blocks, size=figures.block_size)
    if lm.config is None:
        return text + t("kv.server.no_config", lang)
    c = kvm.compare_server_kv(figures, lm.config)
    reported = (
        t("kv.server.reported", lang, size=kvm.format_bytes(c.reported_bytes)) if c.reported_bytes else ""
    )
    return text + t(
        "kv.server.predicted",
        lang,
        note=localize(c.dtype_note, lang),
        per_token=c.bytes_per_token,
        tokens=c.capacity_tokens,
        size=kvm.format_bytes(c.predicted_bytes),
        reported=reported,
    )


def measured_text(lm: Engine, n: int, m: Measurement, lang: str = "en") -> str:
    """A real cache's bytes next to the formula's, and how both were counted."""
    return t(
        "kv.measured",
        lang,
        measured=m.measured_bytes,
        predicted=m.predicted.total_bytes,
        verdict=t("kv.equal" if m.equal else "kv.differ", lang),
        name=lm.name,
        loaded=model_dtype_name(lm),
        tokens=n,
        dtype=m.dtype,
        layers=len(m.measured_layers),
        call=f"kv_cache_bytes(config, {n}, 1, {m.dtype!r}, 'transformers')",
        size=kvm.format_bytes(m.predicted.total_bytes),
    )


def model_dtype_name(lm: Engine) -> str:
    """The loaded model's dtype as the calculator names it: torch.float32 -> "float32" (a serving
    engine's weights format is not known here: bfloat16, how most checkpoints are published)."""
    return str(lm.dtype).removeprefix("torch.") if lm.dtype is not None else "bfloat16"
