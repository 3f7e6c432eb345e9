"""A crowd on one app: 32 tabs at once, coming and going, using every tab, against the real model.

    python bench/bench_crowd.py [--sessions 32] [--requests 500] [--tabs 2] [--device cpu|cuda]
                                [--decode auto|static|eager] [--random-weights]
                                [--batching both|continuous|off]

With --batching both (the default) the same load runs twice in one run, on a server with
continuous batching off (each request its own forwards, PLAYGROUND_MODEL_CONCURRENCY at once) and
on one with it on (every chat stream, step, beam search and measured cache of every tab in one
running batch), and the two are compared side by side: p95 with batching / p95 without (goal <= 0.4
at 32 users), tokens/s.

Starts the app in a subprocess as a Space runs it, with its configured bounds
(PLAYGROUND_KV_STORE_MIB, PLAYGROUND_MAX_WORKSPACES, PLAYGROUND_MODEL_CONCURRENCY). First every kind
of session runs alone: its answers are the expected ones and its latencies the baseline. Then
`--sessions` users at once each open a tab (one gradio_client per user, a new Gradio session per
tab), run one session (`--tabs` tabs of the app, chat, step by step, beam search, KV calculator and
measured cache, and the moves between them), close the tab and open the next, until `--requests`
requests are answered. Prints p50 / p95 / max latency per kind of request and overall next to the
same requests alone, errors, answers that differ from alone, and the server's RSS (with its stores'
sizes) every 50 requests, and whether it levelled off; ends with one JSON line of the same figures.

Unlike the other benchmarks it needs gradio and gradio_client (it runs the server side of a Space);
importing it (or --help) needs neither.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.crowd_sessions import (  # noqa: E402
    PROFILES,
    Request,
    browser,
    launched,
    next_tab,
    run_session,
    run_tab,
    same_but_last_digits,
)
from bench.memory import rss_mib  # noqa: E402

SAMPLE_EVERY = 50  # requests between two RSS samples
STATS_SECONDS = 0.25  # how often the server writes its stores' sizes


# --- the server (a subprocess) ----------------------------------------------------------------------


def serve(args: argparse.Namespace) -> None:
    """Build and run the app as app.py does, writing its stores' sizes to args.stats."""
    from playground.settings import load_settings

    settings = load_settings(device=args.device, decode=args.decode, batching=args.batching)
    if args.parent:  # started by a bench (start_server)
        threading.Thread(target=exit_with_parent, args=(args.parent,), daemon=True).start()
    with launched(bench_engine(args, settings), settings, port=args.port) as app:
        watch = (Path(args.stats), app.demo, app.engine, app.workspaces, settings)
        threading.Thread(target=write_stats, args=watch, daemon=True).start()
        app.demo.block_thread()


def exit_with_parent(parent: int) -> None:
    """End the server when the bench that started it is gone (killed, so its cleanup never ran): an
    orphan would go on serving its queue and take the cores from the next measurement."""
    while os.getppid() == parent:  # the bench's own pid: a bench gone before this line is seen too
        time.sleep(1)
    os._exit(0)


def bench_engine(args: argparse.Namespace, settings: Any) -> Any:
    """The engine app.py would make from these settings (the embedded model by default), or the
    embedded architecture with random weights (no weight files needed)."""
    if args.random_weights:
        from bench.common import load_bench_model

        return load_bench_model(args.device, True, decode=args.decode)
    from app import create_engine

    return create_engine(settings)


def write_stats(path: Path, demo: Any, engine: Any, workspaces: Any, settings: Any) -> None:
    """Every STATS_SECONDS: the KV store, workspaces and Gradio tab states now and at their peak."""
    peak: dict[str, float] = {}
    bounds = {
        "kv_store_mib": settings.kv_store_mib,
        "max_workspaces": settings.max_workspaces,
        "model_concurrency": engine.concurrency or settings.model_concurrency,
        "batching": settings.batching,
    }
    while True:
        holder = getattr(demo, "state_holder", None)
        now = {
            "kv_mib": engine.kv_store.total_bytes / 2**20,
            "kv_entries": len(engine.kv_store.keys()),
            "workspaces": len(workspaces),
            "gradio_tabs": len(holder.session_data) if holder is not None else 0,
        }
        peak = {name: max(value, peak.get(name, 0)) for name, value in now.items()}
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"now": now, "peak": peak, "bounds": bounds}))
        os.replace(temporary, path)
        time.sleep(STATS_SECONDS)


# --- the crowd --------------------------------------------------------------------------------------


@dataclass
class Server:
    process: subprocess.Popen
    url: str
    stats: Path
    log: Path

    def rss_mib(self) -> float:
        rss = rss_mib(self.process.pid)
        if rss != rss:  # NaN: a levelling-off verdict over it would be silently wrong
            raise RuntimeError("no VmRSS for the server process")
        return rss

    def stores(self) -> dict[str, Any]:
        return json.loads(self.stats.read_text())


def start_server(args: argparse.Namespace, workdir: Path) -> Server:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stats, log = workdir / "stats.json", workdir / "server.log"
    command = [sys.executable, __file__, "--serve", "--port", str(port), "--stats", str(stats)]
    command += ["--parent", str(os.getpid())]
    command += ["--device", args.device, "--decode", args.decode, "--batching", args.batching]
    command += ["--random-weights"] if args.random_weights else []
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    server = Server(process, f"http://127.0.0.1:{port}", stats, log)
    wait_ready(server)
    return server


def wait_ready(server: Server, seconds: float = 600) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server stopped:\n{server.log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{server.url}/config", timeout=5).status_code == 200 and server.stats.exists():
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"the server did not start in {seconds:.0f} s")


@dataclass
class Crowd:
    server: Server
    expected: dict[int, list]
    tabs: int
    sessions_planned: int
    started_at: float = field(default_factory=time.perf_counter)
    requests: list[Request] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    differing: list[int] = field(default_factory=list)
    next_session: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answered(self, request: Request) -> None:
        with self.lock:
            self.requests.append(request)
            due = len(self.requests) % SAMPLE_EVERY == 0
        if due:
            self.samples.append(self.sample(len(self.requests)))

    def sample(self, requests: int) -> dict[str, Any]:
        stores = self.server.stores()["now"]
        elapsed = time.perf_counter() - self.started_at
        return {"requests": requests, "seconds": elapsed, "rss_mib": self.server.rss_mib(), **stores}

    def user(self) -> None:
        """One person: opens tabs one after another until the planned sessions are all taken."""
        try:
            self.browse()
        except Exception as exc:  # the browser itself failed (its client, a new tab): counted too
            self.errors.append(f"a user's browser: {type(exc).__name__}: {str(exc)[:200]}")

    def browse(self) -> None:
        with browser(self.server.url) as client:
            while (i := self.take_session()) is not None:
                try:
                    seen, _ = run_session(client, i, self.tabs, self.answered)
                except Exception as exc:  # counted and reported; the other users go on
                    self.errors.append(f"session {i}: {type(exc).__name__}: {str(exc)[:200]}")
                else:
                    if not same_but_last_digits(seen, self.expected[i % PROFILES]):
                        self.differing.append(i)
                next_tab(client)

    def take_session(self) -> int | None:
        with self.lock:
            if self.next_session >= self.sessions_planned:
                return None
            self.next_session += 1
            return self.next_session - 1


def alone(server: Server, tabs: int) -> tuple[dict[int, list], list[Request]]:
    """Every kind of session once, one at a time: the expected answers and the baseline latencies."""
    expected, requests = {}, []
    for i in range(PROFILES):
        expected[i], timed = run_tab(server.url, i, tabs)
        requests += timed
    return expected, requests


# --- the report --------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def latencies(crowd: list[Request], baseline: list[Request]) -> dict[str, dict[str, float]]:
    """Per kind of request (and "all"): n, p50 / p95 / max seconds in the crowd, p50 alone."""
    figures = {}
    for kind in [*sorted({r.kind for r in crowd}), "all"]:
        times = [r.seconds for r in crowd if kind in ("all", r.kind)]
        base = [r.seconds for r in baseline if kind in ("all", r.kind)] or [math.nan]
        figures[kind] = {
            "n": len(times),
            "p50_s": statistics.median(times),
            "p95_s": percentile(times, 0.95),
            "max_s": max(times),
            "alone_p50_s": statistics.median(base),
        }
    return figures


def latency_table(figures: dict[str, dict[str, float]]) -> list[str]:
    head = f"{'request':<14}{'n':>5}{'p50 s':>9}{'p95 s':>9}{'max s':>9}{'alone p50 s':>13}{'p50 ratio':>11}"
    lines = [head]
    for kind, f in figures.items():
        lines.append(
            f"{kind:<14}{f['n']:>5}{f['p50_s']:>9.2f}{f['p95_s']:>9.2f}{f['max_s']:>9.2f}"
            f"{f['alone_p50_s']:>13.2f}{f['p50_s'] / f['alone_p50_s']:>10.1f}x"
        )
    return lines


def rss_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'requests':>9}{'s':>7}{'RSS MiB':>9}{'KV MiB':>8}{'KV keys':>8}{'tabs':>6}{'Gradio':>8}"]
    for row in rows:
        lines.append(
            f"{row['requests']!s:>9}{row['seconds']:>7.0f}{row['rss_mib']:>9.0f}{row['kv_mib']:>8.1f}"
            f"{row['kv_entries']:>8}{row['workspaces']:>6}{row['gradio_tabs']:>8}"
        )
    return lines


def levelled_off(before: float, rss: list[float]) -> tuple[bool, str]:
    """RSS levels off when its second half of samples grows by at most 10 % of the whole growth
    (or 16 MiB): the stores have reached their steady size."""
    half = len(rss) // 2
    if half == 0:
        return False, "too few samples"
    early, late = max(rss[:half]), max(rss[half:])
    total = max(rss) - before
    ok = late - early <= max(16.0, 0.1 * total)
    return ok, f"+{early - before:.0f} MiB in the first half, {late - early:+.0f} MiB in the second"


def report(args: argparse.Namespace, crowd: Crowd, baseline: list[Request], rss: dict[str, Any]) -> dict:
    """Print the figures side by side (crowd and alone); returns them for the JSON line."""
    samples = sorted(crowd.samples, key=lambda row: row["requests"])
    figures = latencies(crowd.requests, baseline)
    print(
        f"\n{len(crowd.requests)} requests from {crowd.next_session} tabs, {args.sessions} users at once, "
        f"{args.tabs} tabs of the app per session; {rss['end']['seconds']:.0f} s"
    )
    print("\n".join(latency_table(figures)))
    print(f"errors: {len(crowd.errors)}; answers different from alone: {len(crowd.differing)} sessions")
    for error in crowd.errors[:5]:
        print("  " + error)
    print("\nserver RSS and stores (before = warm, after = all tabs closed):")
    print("\n".join(rss_table([rss["before"], *samples, rss["end"], rss["after"]])))
    ok, detail = levelled_off(rss["before"]["rss_mib"], [s["rss_mib"] for s in [*samples, rss["end"]]])
    print(
        f"RSS levelled off: {'yes' if ok else 'NO'} ({detail}); before {rss['before']['rss_mib']:.0f} MiB, "
        f"at {rss['end']['requests']} requests {rss['end']['rss_mib']:.0f} MiB, "
        f"after the tabs closed {rss['after']['rss_mib']:.0f} MiB"
    )
    stores = crowd.server.stores()
    peak, bounds = stores["peak"], stores["bounds"]
    print(
        f"bounds: KV store peak {peak['kv_mib']:.1f} of {bounds['kv_store_mib']} MiB; workspaces peak "
        f"{peak['workspaces']:.0f} of {bounds['max_workspaces']}; Gradio tab states peak "
        f"{peak['gradio_tabs']:.0f} of {bounds['max_workspaces']}; model events at once "
        f"<= {bounds['model_concurrency']}"
    )
    rss_figures = {name: round(rss[name]["rss_mib"], 1) for name in ("before", "end", "after")}
    return {
        "latency": {kind: {k: round(v, 3) for k, v in f.items()} for kind, f in figures.items()},
        "errors": len(crowd.errors),
        "sessions_differing": len(crowd.differing),
        "rss_mib": rss_figures,
        "rss_levelled_off": ok,
        "peak": peak,
        "bounds": bounds,
    }


def settle(crowd: Crowd, seconds: float = 60) -> dict[str, Any]:
    """The server once every tab has closed (Gradio notices a closed tab within its heartbeat)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and crowd.server.stores()["now"]["workspaces"] > 0:
        time.sleep(1)
    return {**crowd.sample(len(crowd.requests)), "requests": "after"}


def measure(args: argparse.Namespace, server: Server) -> tuple[Crowd, list[Request], dict[str, Any]]:
    """Sessions alone (expected answers, baseline), then the crowd; the server's RSS around it."""
    expected, baseline = alone(server, args.tabs)
    per_session = len(baseline) / PROFILES
    crowd = Crowd(server, expected, args.tabs, math.ceil(args.requests / per_session))
    before = {**settle(crowd), "requests": "before", "seconds": 0.0}  # warm, lone tabs closed
    crowd.started_at = time.perf_counter()
    with ThreadPoolExecutor(args.sessions) as pool:
        users = [pool.submit(crowd.user) for _ in range(args.sessions)]
    for user in users:
        user.result()  # user() counts its own errors: this raises only on a bug in the bench
    end = {**crowd.sample(len(crowd.requests)), "requests": len(crowd.requests)}
    return crowd, baseline, {"before": before, "end": end, "after": settle(crowd)}


def one_mode(args: argparse.Namespace, batching: str) -> dict[str, Any]:
    """The whole measurement on a server with batching on or off; its figures."""
    mode = argparse.Namespace(**{**vars(args), "batching": batching})
    print(f"\n=== batching {batching} ===")
    with tempfile.TemporaryDirectory(prefix="bench-crowd-") as workdir:
        server = start_server(mode, Path(workdir))
        try:
            crowd, baseline, rss = measure(mode, server)
            figures = report(mode, crowd, baseline, rss)
        finally:
            server.process.terminate()
            server.process.wait(30)
    seconds = rss["end"]["seconds"]
    tokens = sum(r.tokens for r in crowd.requests)
    rate = round(tokens / seconds, 2) if seconds else 0.0
    sizes = {"tabs": crowd.next_session, "requests": len(crowd.requests), "seconds": round(seconds, 1)}
    return {**figures, **sizes, "tokens": tokens, "tok_s": rate}


def compare(modes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Side by side: latency percentiles, tokens/s, errors, answers that differ, RSS; the p95 ratio."""
    print("\n=== continuous batching vs off, the same load ===")
    print(f"{'':<24}{'off':>14}{'continuous':>14}")
    rows = [("p50 s (all requests)", "p50_s"), ("p95 s", "p95_s"), ("max s", "max_s")]
    for label, key in rows:
        print(f"{label:<24}" + "".join(f"{m['latency']['all'][key]:>14.2f}" for m in modes.values()))
    for label, key in (
        ("tokens/s (chat)", "tok_s"),
        ("errors", "errors"),
        ("sessions differing", "sessions_differing"),
    ):
        print(f"{label:<24}" + "".join(f"{m[key]:>14}" for m in modes.values()))
    print(f"{'RSS end MiB':<24}" + "".join(f"{m['rss_mib']['end']:>14}" for m in modes.values()))
    off, on = modes["off"]["latency"]["all"]["p95_s"], modes["continuous"]["latency"]["all"]["p95_s"]
    ratio = on / off if off else float("nan")
    print(f"p95 continuous / off: {ratio:.3f} (goal <= 0.4 at 32 users)")
    return {"p95_ratio": round(ratio, 3), "goal_p95_ratio": 0.4, "goal_met": ratio <= 0.4}


def run(args: argparse.Namespace) -> None:
    from bench.common import print_json

    load_start = os.getloadavg()
    print(f"load average at start: {load_start}")
    wanted = ("off", "continuous") if args.batching == "both" else (args.batching,)
    modes = {mode: one_mode(args, mode) for mode in wanted}
    compared = compare(modes) if len(modes) == 2 else {}
    load_end = os.getloadavg()
    print(f"load average at end: {load_end}")
    print_json(
        "crowd",
        device=args.device,
        random_weights=args.random_weights,
        users=args.sessions,
        app_tabs_per_session=args.tabs,
        cpu_count=os.cpu_count(),
        load_average=[load_start[0], load_end[0]],
        modes=modes,
        **compared,
    )


def main() -> None:
    title, _, *details = __doc__.split("\n\n")
    parser = argparse.ArgumentParser(
        description=title, epilog="\n\n".join(details), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=32, help="users at once (default 32)")
    parser.add_argument("--requests", type=int, default=500, help="requests in all (default 500)")
    parser.add_argument(
        "--tabs", type=int, default=2, choices=(1, 2, 3, 4), help="app tabs each session uses (default 2)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument(
        "--decode",
        choices=("auto", "static", "eager"),
        default="auto",
        help="decode path: auto = static KV cache + CUDA graphs on cuda, eager on cpu",
    )
    parser.add_argument("--random-weights", action="store_true", help="the embedded shape, random weights")
    parser.add_argument(
        "--batching",
        choices=("both", "continuous", "off"),
        default="both",
        help="continuous batching on, off, or both compared in one run (default)",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server subprocess
    parser.add_argument("--parent", type=int, default=0, help=argparse.SUPPRESS)  # its bench's pid
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stats", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sessions < 1 or args.requests < 1:
        parser.error("--sessions and --requests must be at least 1")
    if args.serve:
        serve(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
