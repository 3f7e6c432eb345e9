"""LLM generation playground: the Python API (no UI imports outside playground.ui).

    import playground
    lm = playground.load_model()                      # the embedded SmolLM2-135M-Instruct, offline
    answer = playground.run_chat(lm, playground.ChatRequest([{"role": "user", "content": "Hi!"}]))
    session = playground.StepSession(lm, "The capital of France is")
    tree = playground.beam_search(lm, "The best thing about", num_beams=4, max_new_tokens=6)
    playground.kv_cache_bytes(lm.config, seq_len=4096, dtype="float16")
    playground.hood.kv_on_off.run(lm, playground.hood.preset_ids(lm.tokenizer, 200), new_tokens=4)
    gemma = playground.load_model("gemma-3-270m")      # the second embedded model (a base model)
    playground.score_text(gemma, "The capital of France is", " Paris.")   # per-token log-probs
    playground.run_compare([playground.Side(lm), playground.Side(gemma)], [{"role": "user", "content": "Hi"}])
    playground.ModelRegistry().engine("gemma-3-270m")  # several models: loaded on demand, bounded

The engine (playground.engine) is the only code that runs a model; chat, step, beam, kv and the
lessons of "Under the hood" (playground.hood) are modules over it.
"""

from playground import _quiet, hood  # noqa: F401  (_quiet first: before anything imports transformers)
from playground.beam import BeamTree, beam_search
from playground.chat import ChatRequest, ChatSession, run_chat, stream_chat
from playground.compare import Side, run_compare, stream_compare
from playground.engine import Engine, SamplingSettings, connect, load_model
from playground.errors import PlaygroundError
from playground.kv import fit_on_gpu, kv_cache_bytes
from playground.models import ModelRegistry
from playground.scoring import align_scores, score_text
from playground.step import StepSession

__all__ = [
    "BeamTree",
    "ChatRequest",
    "ChatSession",
    "Engine",
    "ModelRegistry",
    "PlaygroundError",
    "SamplingSettings",
    "Side",
    "StepSession",
    "align_scores",
    "beam_search",
    "connect",
    "fit_on_gpu",
    "hood",
    "kv_cache_bytes",
    "load_model",
    "run_chat",
    "run_compare",
    "score_text",
    "stream_chat",
    "stream_compare",
]
