"""Figures of the lesson "Prefill vs decode" (playground/hood/prefill_decode.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.plots.hood.style import DECODE, PREFILL, Series, line_figure

LENGTH = "prompt length (tokens)"


def throughput_figure(lengths: Sequence[int], prefill: Sequence[float], decode: Sequence[float]) -> go.Figure:
    """Tokens/s of prefill and of decode against the prompt length (log-log)."""
    return line_figure(
        [
            Series("prefill: read the prompt", lengths, prefill, PREFILL, "%{x:,} tokens: %{y:,.0f} tok/s"),
            Series(
                "decode: one token after it", lengths, decode, DECODE, "after %{x:,} tokens: %{y:,.1f} tok/s"
            ),
        ],
        LENGTH,
        "tokens / s",
        320,
        log=True,
    )


def intensity_figure(lengths: Sequence[int], prefill: Sequence[float], decode: Sequence[float]) -> go.Figure:
    """Estimated FLOPs per byte moved (arithmetic intensity) of prefill and decode (log-log)."""
    return line_figure(
        [
            Series("prefill", lengths, prefill, PREFILL, "%{x:,} tokens: %{y:,.1f} FLOP/byte"),
            Series("decode", lengths, decode, DECODE, "after %{x:,} tokens: %{y:,.2f} FLOP/byte"),
        ],
        LENGTH,
        "FLOPs per byte (estimated)",
        320,
        log=True,
    )
