"""The remote engine against a real llama-server running the embedded GGUF (built by
scripts/build_llama_server.sh, which test.sh runs beside the tests; skipped with the reason when
it is not built).

Each number is compared with the same server's own answer for the same token ids: llama.cpp's
log-probs differ from our float32 in-process model by 0.05-0.15 nats (it quantizes activations),
so each engine is compared with itself.
"""

from __future__ import annotations

import threading

import httpx
import pytest

from playground.beam import beam_search
from playground.chat import ChatRequest, run_chat, stream_chat
from playground.engine import connect
from playground.engine.remote.launcher import LlamaServer
from playground.engine.sampling import SamplingSettings
from playground.errors import EngineUnavailable
from playground.step import StepSession

pytestmark = pytest.mark.llama_server  # waits for the build test.sh runs beside the tests (conftest.py)

PROMPT = "The capital of France is"
GREEDY = SamplingSettings(temperature=0)
TOLERANCE = 2e-3  # nats: the same ids evaluated in one batch or token by token (float rounding)


@pytest.fixture(scope="module")
def server(llama_server_path):
    with LlamaServer.start() as running:
        yield running


@pytest.fixture(scope="module")
def engine(server):
    return connect(server.url, "llama.cpp")


def server_top(server: LlamaServer, ids: list[int], n: int) -> list[tuple[int, float]]:
    """The server's own raw top-n after ids, from a fresh evaluation (no prompt cache)."""
    body = {"prompt": ids, "n_predict": 1, "n_probs": n, "temperature": 0, "cache_prompt": False}
    item = httpx.post(f"{server.url}/completion", json=body, timeout=60).json()["completion_probabilities"][0]
    return [(alt["id"], alt["logprob"]) for alt in item["top_logprobs"]]


def test_connect_finds_the_embedded_tokenizer_and_says_what_it_is(engine):
    caps = engine.capabilities
    assert engine.kind == "llama.cpp" and engine.vocab_size == 49152 and engine.context_length == 4096
    assert (
        engine.top_n == 1000 and not caps.full_vocab and "top 1,000 of 49,152" in caps.notes["distribution"]
    )
    assert "embedded model" in engine.tokenizer_source
    assert caps.score is False and "no prompt scoring" in caps.why_not("score")
    assert (
        "tested against a live llama-server" in caps.notes["engine"]
        and "0.05-0.15 nats" in caps.notes["engine"]
    )
    assert not caps.attentions and not caps.hidden_states


def test_step_candidates_equal_the_servers_own_n_probs(server, engine):
    session = StepSession(engine, PROMPT, chat=True)
    expected = server_top(server, session.prompt_ids, 10)
    candidates = session.candidates(10)
    assert [c.token_id for c in candidates] == [i for i, _ in expected]
    assert [c.logprob for c in candidates] == pytest.approx([lp for _, lp in expected], abs=TOLERANCE)
    session.pick(expected[1][0])
    after = server_top(server, session.ids, 10)
    assert [c.token_id for c in session.candidates(10)] == [i for i, _ in after]
    assert session.ledger[-1].logprob == pytest.approx(expected[1][1], abs=TOLERANCE)


def test_forced_text_is_scored_one_request_per_token(server, engine):
    session = StepSession(engine, PROMPT)
    entries = session.force(" Paris, of")
    assert len(entries) == 3
    for entry in entries:
        before = session.ids[: len(session.prompt_ids) + entry.step - 1]
        everything = dict(server_top(server, before, engine.vocab_size))
        assert entry.logprob == pytest.approx(everything[entry.token_id], abs=TOLERANCE)


def test_greedy_chat_equals_the_servers_greedy_completion(server, engine):
    request = ChatRequest(
        [{"role": "user", "content": "What is the capital of France?"}], settings=GREEDY, max_new_tokens=24
    )
    ours = run_chat(engine, request)
    body = {
        "prompt": ours.prompt_ids,
        "n_predict": 24,
        "temperature": 0,
        "return_tokens": True,
        "cache_prompt": False,
    }
    reference = httpx.post(f"{server.url}/completion", json=body, timeout=120).json()
    assert ours.answer_ids[: len(reference["tokens"])] == reference["tokens"]
    assert ours.text.startswith(engine.tokenizer.decode(reference["tokens"][:8]))
    assert all(t.rank == 1 and t.sampled_prob == 1.0 for t in ours.tokens)
    assert engine.last_timings is not None and engine.last_timings.generated_tokens > 0


def test_beam_tree_equals_a_brute_force_search_over_the_servers_top_k(server, engine):
    beams, steps = 3, 4
    tree = beam_search(engine, PROMPT, beams, steps)
    prompt_ids = list(tree.prompt_ids)
    running: list[tuple[list[int], float]] = [([], 0.0)]
    for _ in range(steps):  # no end token among the contenders (asserted): the plain textbook search
        contenders = [
            ([*seq, token], score + lp)
            for seq, score in running
            for token, lp in server_top(server, prompt_ids + seq, 2 * beams)
        ]
        contenders.sort(key=lambda c: -c[1])
        assert not any(seq[-1] in engine.eos_token_ids for seq, _ in contenders[: 2 * beams])
        running = contenders[:beams]
    assert tree.sequences == [seq for seq, _ in running]
    assert tree.scores == pytest.approx([score / steps for _, score in running], abs=TOLERANCE)


def test_kv_tab_shows_the_servers_own_figures(engine):
    from playground.ui.kv_tab import measure

    text, rows = measure(engine, 128)
    assert "4,096 tokens" in text and "Predicted by the calculator" in text and rows == []


def test_app_starts_on_the_engine_with_its_header(server):
    import app

    settings = app.parse_args(["--engine", "llama.cpp", "--engine-url", server.url])
    demo = app.create_demo(settings)
    header = next(
        block.value for block in demo.blocks.values() if getattr(block, "elem_id", None) == "header"
    )
    assert f"llama.cpp at {server.url}" in header and "every number comes from it" in header


def test_killed_server_mid_stream_is_a_clear_error_then_a_retry_works(server, engine):
    """Kill the server while it streams an answer: a clear error (no hang); restarted, a retry works."""
    request = ChatRequest(
        [{"role": "user", "content": "Tell me a long story about a cat."}],
        settings=GREEDY,
        max_new_tokens=400,
    )
    updates = stream_chat(engine, request, 1024)
    for _ in range(5):
        next(updates)
    killer = threading.Thread(target=server.kill)
    killer.start()
    with pytest.raises(EngineUnavailable, match=r"llama\.cpp server") as failure:
        for _ in updates:
            pass
    killer.join()
    assert any(word in str(failure.value) for word in ("broke", "Cannot reach", "Retry"))
    with pytest.raises(EngineUnavailable, match=r"Cannot reach the llama\.cpp server"):
        StepSession(engine, PROMPT).candidates(3)
    server.launch()
    short = ChatRequest(request.messages, settings=GREEDY, max_new_tokens=8)
    assert len(run_chat(engine, short).tokens) == 8


def test_every_tab_works_on_the_engine(engine):
    """The tabs' handlers as plain functions on the remote engine: chat (and a fork), step by step
    (pick, force, probability of, greedy, open a chat token), beam search, KV."""
    from playground.settings import load_settings
    from playground.ui.beam_tab import BeamHandlers
    from playground.ui.chat_controls import ChatControls
    from playground.ui.chat_tab import ChatHandlers
    from playground.ui.step_tab import StepHandlers
    from playground.workspace import Workspaces

    workspaces = Workspaces(engine)
    chat = ChatHandlers(engine, load_settings(), workspaces)
    updates = list(chat.chat("Name a color.", [], ChatControls("", 0.7, 40, 0.95, 0.0, 1.0, 6, 7)))
    answer = updates[-1]["history"][-1]["content"]
    assert answer.strip() and "decode" in answer
    forked = list(chat.chat_fork(updates[-1]["history"], 1, 504, False))  # " The" at position 1
    assert forked[-1]["history"][-1]["content"] != answer
    step = StepHandlers(engine, workspaces)
    assert step.step_start(PROMPT, False)
    step.step_pick_rank(2)
    step.step_force(" Paris")
    assert "P = " in step.step_probability(" Lyon") and "nan" not in step.step_probability(" Lyon")
    step.step_greedy()
    assert step.step_open_chat_token(2)
    tree = BeamHandlers(engine, workspaces).beam_run(PROMPT, False, 2, 3, 1.0, False, True, True, "png")
    assert tree["table"] is not None
