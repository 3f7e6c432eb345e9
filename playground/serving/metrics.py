"""Serving measured the way the field measures it (vLLM's and SGLang's `bench_serving`):

- TTFT: seconds from sending a request to its first token;
- TPOT: (end-to-end - TTFT) / (tokens - 1), per request with more than one token;
- ITL: every gap between two tokens of a request, all requests pooled;
- E2E: seconds from sending a request to its last token;
- goodput: requests per second that meet every SLO (TTFT <= 2 s and TPOT <= 300 ms by default);
- capacity: the highest arrival rate at which at least 90 % of the requests meet the SLO.

Pure Python on plain numbers: the benchmark, the "Serving many" lesson and the tests share it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class Slo:
    ttft_s: float = 2.0  # seconds to the first token
    tpot_s: float = 0.3  # seconds per output token after the first
    attained: float = 0.9  # share of requests that must meet both, for a rate to be within capacity


@dataclass
class RequestTiming:
    """One request of a load, its clock starting when the load started."""

    kind: str  # "chat", "long prompt", "step", ...
    sent: float  # seconds after the load's start
    token_times: list[float] = field(default_factory=list)  # seconds after the load's start, one per token
    error: str = ""  # empty when it was answered
    same: bool | None = None  # its answer equals the same request's alone (None: not checked)
    tokens: int = 0  # tokens it got, when a streamed chunk may carry several (0: one per token time)

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.token_times)

    @property
    def ttft(self) -> float | None:
        return self.token_times[0] - self.sent if self.ok else None

    @property
    def e2e(self) -> float | None:
        return self.token_times[-1] - self.sent if self.ok else None

    @property
    def tpot(self) -> float | None:
        if not self.ok or self.count < 2:
            return None
        return (self.token_times[-1] - self.token_times[0]) / (self.count - 1)

    @property
    def count(self) -> int:
        """Tokens it got."""
        return self.tokens or len(self.token_times)

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times, self.token_times[1:], strict=False)]

    def meets(self, slo: Slo) -> bool:
        tpot = self.tpot
        return self.ok and self.ttft <= slo.ttft_s and (tpot is None or tpot <= slo.tpot_s)


@dataclass
class LoadSummary:
    """A load's figures: latency percentiles (seconds), throughput, goodput, errors."""

    rate: float  # arrivals per second asked for
    burstiness: float  # 1: Poisson; < 1 burstier (gamma)
    requests: int
    seconds: float  # from the first arrival to the last token
    errors: int
    differing: int  # answers that differ from the same request alone
    tokens: int
    attained: float  # share of requests within the SLO
    goodput: float  # requests per second within the SLO
    latency: dict[str, dict[str, float]]  # "ttft" / "tpot" / "itl" / "e2e" -> {"p50": s, "p95": s, "p99": s}

    @property
    def throughput(self) -> float:
        return (self.requests - self.errors) / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    def within(self, slo: Slo) -> bool:
        return self.errors == 0 and self.attained >= slo.attained


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation, as numpy's default; NaN of nothing."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def spread(values: Sequence[float]) -> dict[str, float]:
    return {f"p{q}": percentile(values, q) for q in PERCENTILES}


def summarize(timings: Sequence[RequestTiming], rate: float, burstiness: float, slo: Slo) -> LoadSummary:
    done = [t for t in timings if t.ok]
    start = min((t.sent for t in timings), default=0.0)
    end = max((t.token_times[-1] for t in done), default=start)
    latency = {
        "ttft": spread([t.ttft for t in done]),
        "tpot": spread([t.tpot for t in done if t.tpot is not None]),
        "itl": spread([gap for t in done for gap in t.gaps]),
        "e2e": spread([t.e2e for t in done]),
    }
    good = sum(t.meets(slo) for t in timings)
    seconds = end - start
    return LoadSummary(
        rate=rate,
        burstiness=burstiness,
        requests=len(timings),
        seconds=seconds,
        errors=len(timings) - len(done),
        differing=sum(t.same is False for t in timings),
        tokens=sum(t.count for t in done),
        attained=good / len(timings) if timings else 0.0,
        goodput=good / seconds if seconds else 0.0,
        latency=latency,
    )


def capacity(summaries: Sequence[LoadSummary], slo: Slo) -> float:
    """The highest rate within the SLO, going up the sweep until the first rate that is not (0: none)."""
    best = 0.0
    for summary in sorted(summaries, key=lambda s: s.rate):
        if not summary.within(slo):
            break
        best = summary.rate
    return best
