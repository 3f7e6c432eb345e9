"""Figures of the lesson "Prefill vs decode" (playground/hood/prefill_decode.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.plots.hood.style import DECODE, PREFILL, Series, line_figure
from playground.ui.i18n import DEFAULT, t


def throughput_figure(
    lengths: Sequence[int], prefill: Sequence[float], decode: Sequence[float], lang: str = DEFAULT
) -> go.Figure:
    """Tokens/s of prefill and of decode against the prompt length (log-log)."""
    prefill_hover, decode_hover = t("hood.pd.plot.prefill_hover", lang), t("hood.pd.plot.decode_hover", lang)
    return line_figure(
        [
            Series(t("hood.pd.plot.prefill", lang), lengths, prefill, PREFILL, prefill_hover),
            Series(t("hood.pd.plot.decode", lang), lengths, decode, DECODE, decode_hover),
        ],
        t("hood.pd.plot.length", lang),
        t("hood.pd.plot.tokens_per_s", lang),
        320,
        log=True,
    )


def intensity_figure(
    lengths: Sequence[int], prefill: Sequence[float], decode: Sequence[float], lang: str = DEFAULT
) -> go.Figure:
    """Estimated FLOPs per byte moved (arithmetic intensity) of prefill and decode (log-log)."""
    prefill_hover = t("hood.pd.plot.prefill_flops_hover", lang)
    decode_hover = t("hood.pd.plot.decode_flops_hover", lang)
    return line_figure(
        [
            Series(t("hood.pd.plot.prefill_short", lang), lengths, prefill, PREFILL, prefill_hover),
            Series(t("hood.pd.plot.decode_short", lang), lengths, decode, DECODE, decode_hover),
        ],
        t("hood.pd.plot.length", lang),
        t("hood.pd.plot.flops", lang),
        320,
        log=True,
    )
