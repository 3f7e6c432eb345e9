"""Serving many, measured: open-loop arrivals straight to an engine (load.py), the field's latency
figures (metrics.py: TTFT, TPOT, ITL, E2E, goodput, capacity) and the live crowd of the lesson
"Continuous batching" (crowd.py). No UI and no web framework: a bare GPU box with torch and
transformers runs it (bench/bench_serving.py --in-process).
"""
