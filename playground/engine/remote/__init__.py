"""Remote engines: the engine interface over llama.cpp's llama-server, vLLM and SGLang (HTTP).

    from playground.engine import connect
    engine = connect("http://127.0.0.1:8080", "llama.cpp")
    run_chat(engine, ChatRequest(...)); StepSession(engine, "The capital of France is")

connect.py finds and checks the tokenizer, engine.py is `RemoteEngine` (the Engine interface:
sequences by key, scores rows, beams, chat streaming), adapter.py the engine-neutral calls each
adapter answers, llamacpp.py / vllm.py / sglang.py one thin adapter per engine's native API,
http.py the HTTP client (timeouts, one clear message per failure), notes.py the lines the UI shows.
"""

from playground.engine.remote.connect import KINDS, connect, engine_kind
from playground.engine.remote.engine import RemoteEngine

__all__ = ["KINDS", "RemoteEngine", "connect", "engine_kind"]
