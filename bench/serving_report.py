"""What bench/bench_serving.py prints and draws: the latency table per rate, capacity, the plot of
latency against rate for both batching modes (plotly: HTML, and PNG through a headless Chromium when
playwright is there), and where the batch thread's time went (py-spy samples, classified)."""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from playground.serving.metrics import LoadSummary, Slo

METRICS = ("ttft", "tpot", "itl", "e2e")
BATCH_THREAD = "playground-batcher"


def table(mode: str, summaries: Sequence[LoadSummary]) -> list[str]:
    """One line per rate: p50/p95/p99 of TTFT, TPOT, ITL, E2E (seconds), throughput, goodput, SLO."""
    head = f"{'rate':>6}{'burst':>6}{'n':>4}" + "".join(
        f"{m.upper() + ' p50/p95/p99 s':>23}" for m in METRICS
    )
    head += f"{'req/s':>7}{'tok/s':>7}{'good/s':>7}{'SLO':>6}{'err':>4}{'diff':>5}"
    lines = [f"--- batching {mode} ---", head]
    for s in summaries:
        cells = "".join(
            f"{'/'.join(_short(s.latency[m][f'p{q}']) for q in (50, 95, 99)):>23}" for m in METRICS
        )
        lines.append(
            f"{s.rate:>6.2f}{s.burstiness:>6.1f}{s.requests:>4}{cells}{s.throughput:>7.2f}"
            f"{s.tokens_per_second:>7.1f}{s.goodput:>7.2f}{s.attained:>6.0%}{s.errors:>4}{s.differing:>5}"
        )
    return lines


def _short(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds:.2f}"


def as_json(summary: LoadSummary) -> dict[str, Any]:
    return {
        "rate": summary.rate,
        "burstiness": summary.burstiness,
        "requests": summary.requests,
        "seconds": round(summary.seconds, 2),
        "errors": summary.errors,
        "differing": summary.differing,
        "throughput_req_s": round(summary.throughput, 3),
        "tok_s": round(summary.tokens_per_second, 2),
        "goodput_req_s": round(summary.goodput, 3),
        "slo_attained": round(summary.attained, 3),
        "latency_s": {m: {q: round(v, 4) for q, v in p.items()} for m, p in summary.latency.items()},
    }


def plot(modes: dict[str, list[LoadSummary]], slo: Slo, path: Path) -> list[Path]:
    """Latency (p50 and p95) and SLO attainment against the arrival rate, both modes; writes
    path.html and path.png (the PNG only when playwright and Chromium are there). The files written."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2,
        cols=2,
        subplot_titles=("TTFT", "TPOT", "E2E", "requests within the SLO"),
        vertical_spacing=0.14,
    )
    colors = {"off": "#e4572e", "continuous": "#2a7de1"}
    panels = (("ttft", 1, 1, slo.ttft_s), ("tpot", 1, 2, slo.tpot_s), ("e2e", 2, 1, None))
    for mode, summaries in modes.items():
        _mode_lines(fig, mode, summaries, colors.get(mode), panels)
    for _metric, row, col, limit in panels:
        if limit is not None:
            fig.add_hline(y=limit, line_dash="dash", line_color="grey", row=row, col=col)
        fig.update_yaxes(title_text="seconds", rangemode="tozero", row=row, col=col)
    fig.add_hline(y=slo.attained * 100, line_dash="dash", line_color="grey", row=2, col=2)
    fig.update_yaxes(title_text="% within TTFT and TPOT SLO", range=[0, 105], row=2, col=2)
    fig.update_xaxes(title_text="arrivals per second (Poisson)")
    fig.update_layout(height=700, width=1100, title="Open-loop load: continuous batching vs off")
    path.parent.mkdir(parents=True, exist_ok=True)
    html = path.with_suffix(".html")
    fig.write_html(html, include_plotlyjs=True)
    return [html, *_png(html, path.with_suffix(".png"))]


def _mode_lines(fig: Any, mode: str, summaries: list[LoadSummary], color: str | None, panels: tuple) -> None:
    """One mode's p50 and p95 lines of each latency, and its share within the SLO, against the rate."""
    poisson = sorted((s for s in summaries if s.burstiness == 1.0), key=lambda s: s.rate)
    rates = [s.rate for s in poisson]
    for metric, row, col, _ in panels:
        for q, dash in (("p50", "dot"), ("p95", "solid")):
            fig.add_scatter(
                x=rates,
                y=[s.latency[metric][q] for s in poisson],
                name=f"{mode} {q}",
                legendgroup=f"{mode} {q}",
                showlegend=metric == "ttft",
                line={"color": color, "dash": dash},
                row=row,
                col=col,
            )
    attained = [s.attained * 100 for s in poisson]
    fig.add_scatter(x=rates, y=attained, name=mode, showlegend=False, line={"color": color}, row=2, col=2)


def _png(html: Path, png: Path) -> list[Path]:
    """A screenshot of the HTML plot in headless Chromium (no kaleido needed); none without playwright."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return []
    chromium = Path("/usr/bin/chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(chromium) if chromium.exists() else None, args=["--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 1120, "height": 720})
        page.goto(html.resolve().as_uri())
        page.wait_for_selector(".main-svg")
        page.screenshot(path=str(png), full_page=True)
        browser.close()
    return [png]


# --- where the batch thread's time goes (py-spy raw samples) -------------------------------------------

FRAME = re.compile(r"^thread \((?:0x)?[0-9a-fA-F]+\): (?P<name>[^;]*);?(?P<stack>.*) (?P<count>\d+)$")


def time_split(raw: str) -> dict[str, Any]:
    """py-spy `record --native --idle --threads --format raw` output, the batch thread's samples sorted:
    idle (waiting for requests), the forward computing or waiting to take the GIL back, the rest of an
    iteration (scheduling, choosing tokens, records) computing or waiting for the GIL. Shares of its
    samples, and the other threads' busy samples for scale."""
    counts: collections.Counter[str] = collections.Counter()
    others = 0
    for line in raw.splitlines():
        match = FRAME.match(line.strip())
        if match is None:
            continue
        n = int(match["count"])
        if not match["name"].startswith(BATCH_THREAD):
            others += n if not _idle(match["stack"]) else 0
            continue
        counts[_part(match["stack"])] += n
    total = sum(counts.values())
    shares = {part: round(n / total, 3) for part, n in counts.most_common()} if total else {}
    return {"batch_thread_samples": total, "shares": shares, "other_threads_busy_samples": others}


STEP = re.compile(r"(?:^|;)Batcher\.step \(")
FORWARD = re.compile(r"(?:^|;)(?:Batcher\._forward|run_model) \(")


def _part(stack: str) -> str:
    if not STEP.search(stack):
        return "idle (no request)" if "wait" in stack else "loop (outside an iteration)"
    where = "forward" if FORWARD.search(stack) else "scheduling, tokens, records"
    return f"{where}: {'waiting for the GIL' if waits_for_gil(stack.split(';')) else 'running'}"


def waits_for_gil(frames: list[str]) -> bool:
    """A native stack that waits to take the interpreter lock: CPython's take_gil, or (where it is
    inlined) a condition wait called straight from libpython or from torch's GIL guards (a torch call
    taking the lock back after its work). A wait in OpenMP or in a Python lock is not one."""
    if any("take_gil" in frame for frame in frames):
        return True
    frames = list(frames)
    while frames and frames[-1].startswith("0x") and "(libc.so" in frames[-1]:
        frames.pop()  # unnamed libc frames under the wait
    if not frames or "pthread_cond" not in frames[-1]:
        return False
    callers = [f for f in frames[:-1] if "(libc.so" not in f]
    caller = callers[-1] if callers else ""
    return "libpython" in caller or "gil_scoped" in caller or "(libtorch_python.so)" in caller


def _idle(stack: str) -> bool:
    waits = ("wait", "select", "epoll", "poll (", "sleep", "futex", "accept", "recv")
    last = stack.rsplit(";", 1)[-1]
    return any(w in last for w in waits) and "take_gil" not in stack
