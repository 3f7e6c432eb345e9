"""The vLLM, SGLang and llama-server adapters on their engines' response shapes (no live server).

vLLM and SGLang cannot run on the test machines; tests/remote_fakes.py serves their native APIs
with the shapes from their sources (vllm/entrypoints/openai/completion/protocol.py and serving.py;
sglang/srt/managers/io_struct.py, tokenizer_manager.py, output_processor.py), computed from a real
in-process model. Through the adapter, every number must equal that model's own: these tests
check the adapters' reading of the wire format, not the engines (those stay "not yet tested
against a live server"). llama-server's live tests are in test_remote_llamacpp.py.
"""

from __future__ import annotations

import math

import httpx
import pytest
import torch

from playground.beam import beam_search
from playground.chat import ChatRequest, run_chat
from playground.engine import Engine, connect
from playground.engine.remote.adapter import parse_prometheus
from playground.engine.remote.http import HttpClient
from playground.engine.sampling import SamplingSettings
from playground.errors import EngineUnavailable, PlaygroundError
from playground.step import StepSession
from tests.conftest import make_tiny_llama
from tests.remote_fakes import FakeLlamaServer, FakeModel, FakeSGLang, FakeVLLM

PROMPT = "The capital of France is"
GREEDY = SamplingSettings(temperature=0)


@pytest.fixture(scope="module")
def local(embedded_lm):
    """The model behind every fake server: a tiny random Llama with the embedded tokenizer."""
    return make_tiny_llama(embedded_lm.tokenizer, seed=3)


@pytest.fixture(scope="module")
def model(local) -> FakeModel:
    return FakeModel(local)


def remote(server, kind: str, local, **kwargs):
    return connect(
        "http://fake-engine:8000",
        kind,
        tokenizer=local.tokenizer,
        transport=httpx.MockTransport(server),
        **kwargs,
    )


def local_top(local, ids: list[int], n: int) -> tuple[list[int], list[float]]:
    lp = torch.log_softmax(local.prefill(ids)[-1].float(), -1)
    top = torch.topk(lp, n)
    return top.indices.tolist(), top.values.tolist()


# --- vLLM ---------------------------------------------------------------------------------------------


def test_vllm_connects_with_its_logprobs_limit_and_says_it_is_untested(model, local):
    server = FakeVLLM(model, max_logprobs=20)
    engine = remote(server, "vllm", local)
    caps = engine.capabilities
    assert isinstance(engine, Engine)
    assert (engine.kind, engine.top_n, caps.top_n, caps.full_vocab) == ("vllm", 20, 20, False)
    assert "not yet tested against a live server" in caps.notes["engine"]
    assert "top 20 of 49,152" in caps.notes["distribution"] and "tail" in caps.notes["distribution"]
    assert not caps.attentions and "inside the vLLM server" in caps.why_not("attentions")
    assert engine.raw_when_sampling
    probe = server.requests[0]  # the limit probe: more log-probs than any vocabulary
    assert probe["logprobs"] == 2**31 - 1 and probe["prompt"] == [0]


def test_vllm_whole_vocabulary_and_no_logprobs(model, local):
    assert remote(FakeVLLM(model, max_logprobs=-1), "vllm", local).capabilities.full_vocab
    with pytest.raises(EngineUnavailable, match="returns no log-probs"):
        remote(FakeVLLM(model, max_logprobs=0), "vllm", local)


def test_vllm_step_candidates_pick_and_force_equal_the_model(model, local):
    server = FakeVLLM(model)
    session = StepSession(remote(server, "vllm", local), PROMPT)
    ids, values = local_top(local, session.prompt_ids, 20)
    candidates = session.candidates(20)
    assert [c.token_id for c in candidates] == ids
    assert [c.logprob for c in candidates] == pytest.approx(values, abs=1e-5)
    assert (
        server.requests[-1]["return_tokens_as_token_ids"]
        and server.requests[-1]["prompt"] == session.prompt_ids
    )
    entry = session.pick(ids[3])
    assert (entry.token.rank, entry.logprob) == (4, pytest.approx(values[3], abs=1e-5))
    forced = session.force(" Paris is big")
    assert "prompt_logprobs" in server.requests[-1]  # given tokens: prompt scoring in one request
    for step, record in enumerate(r.token for r in forced):
        before = session.ids[: len(session.prompt_ids) + 1 + step]
        lp = torch.log_softmax(local.prefill(before)[-1].float(), -1)
        assert record.logprob == pytest.approx(float(lp[record.id]), abs=1e-5)
        assert record.rank is None or record.rank == int((lp > lp[record.id]).sum()) + 1


def test_vllm_beam_tree_equals_the_in_process_search(model, local):
    ours = beam_search(remote(FakeVLLM(model), "vllm", local), PROMPT, 3, 5)
    reference = beam_search(local, PROMPT, 3, 5)
    assert ours.sequences == reference.sequences
    assert ours.scores == pytest.approx(reference.scores, abs=1e-4)


def test_vllm_greedy_chat_equals_the_model_and_keys_by_id(model, local):
    server = FakeVLLM(model)
    request = ChatRequest([{"role": "user", "content": "Hi!"}], settings=GREEDY, max_new_tokens=12)
    ours, reference = run_chat(remote(server, "vllm", local), request), run_chat(local, request)
    assert ours.answer_ids == reference.answer_ids and ours.text == reference.text
    for a, b in zip(ours.tokens, reference.tokens, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-5)
        assert [x.id for x in a.top] == [x.id for x in b.top] and a.sampled_prob == 1.0
    body = server.requests[-1]
    assert (
        body["stream"] and body["ignore_eos"] and body["stop_token_ids"] == [2] and body["temperature"] == 0
    )


def test_vllm_text_keyed_logprobs_are_refused(model, local):
    engine = remote(FakeVLLM(model), "vllm", local)

    def text_keys(request: httpx.Request) -> httpx.Response:
        logprobs = {
            "tokens": ["Paris"],
            "token_logprobs": [-0.5],
            "top_logprobs": [{"Paris": -0.5}],
            "text_offset": [0],
        }
        return httpx.Response(200, json={"choices": [{"index": 0, "text": "Paris", "logprobs": logprobs}]})

    engine.adapter.http = HttpClient(
        "http://fake", "the vLLM server", transport=httpx.MockTransport(text_keys)
    )
    with pytest.raises(EngineUnavailable, match="keyed a log-prob by text"):
        StepSession(engine, PROMPT).candidates(5)


def test_vllm_processed_logprobs_make_chat_sample_here_with_raw_numbers(model, local):
    server = FakeVLLM(model, processed=True)
    engine = remote(server, "vllm", local)
    assert not engine.raw_when_sampling and "after its sampling stages" in engine.capabilities.notes["chat"]
    settings = SamplingSettings(temperature=0.7)
    request = ChatRequest([{"role": "user", "content": "Hi!"}], settings=settings, max_new_tokens=4, seed=5)
    update = run_chat(engine, request)
    assert not any(body.get("stream") for body in server.requests[-4:])  # one request per token
    context = list(update.prompt_ids)
    for record in update.tokens:
        lp = torch.log_softmax(local.prefill(context)[-1].float(), -1)
        assert record.logprob == pytest.approx(float(lp[record.id]), abs=1e-5)  # raw, not tempered
        assert 0 < record.sampled_prob <= 1
        context.append(record.id)


def test_vllm_kv_figures_from_cache_config_info(model, local):
    metrics = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
        'gpu_memory_utilization="0.9",num_gpu_blocks="661",num_cpu_blocks="None",engine="0"} 1.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25\n'
    )
    figures = remote(FakeVLLM(model, metrics=metrics), "vllm", local).kv_figures()
    assert (figures.capacity_tokens, figures.block_size, figures.num_blocks) == (661 * 16, 16, 661)
    assert figures.used_tokens == round(0.25 * 661 * 16) and figures.cache_dtype == "auto"


def test_vllm_stream_broken_mid_answer_is_a_clear_error_and_a_retry_works(model, local):
    server = FakeVLLM(model, fail_stream_after=3)
    engine = remote(server, "vllm", local)
    request = ChatRequest([{"role": "user", "content": "Hi!"}], settings=GREEDY, max_new_tokens=8)
    with pytest.raises(EngineUnavailable, match="broke"):
        run_chat(engine, request)
    server.fail_stream_after = None
    assert len(run_chat(engine, request).tokens) == 8


# --- SGLang -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("incremental", [False, True])
def test_sglang_chat_step_and_scoring_equal_the_model(model, local, incremental):
    server = FakeSGLang(model, incremental=incremental)
    engine = remote(server, "sglang", local, top_n=50)
    assert (engine.kind, engine.top_n, engine.context_length) == ("sglang", 50, 500)
    request = ChatRequest([{"role": "user", "content": "Hi!"}], settings=GREEDY, max_new_tokens=6)
    ours, reference = run_chat(engine, request), run_chat(local, request)
    assert ours.answer_ids == reference.answer_ids
    assert [t.logprob for t in ours.tokens] == pytest.approx([t.logprob for t in reference.tokens], abs=1e-5)
    session = StepSession(engine, PROMPT)
    ids, _ = local_top(local, session.prompt_ids, 50)
    assert [c.token_id for c in session.candidates(50)] == ids
    forced = session.force(" Lyon")
    assert server.requests[-1]["logprob_start_len"] == len(session.prompt_ids)
    lp = torch.log_softmax(local.prefill(session.prompt_ids)[-1].float(), -1)
    assert forced[0].logprob == pytest.approx(float(lp[forced[0].token_id]), abs=1e-5)


def test_sglang_beam_and_kv_figures(model, local):
    engine = remote(FakeSGLang(model), "sglang", local)
    assert beam_search(engine, PROMPT, 2, 4).sequences == beam_search(local, PROMPT, 2, 4).sequences
    figures = engine.kv_figures()
    assert (figures.capacity_tokens, figures.used_tokens, figures.usage) == (123456, 30864, 0.25)


def test_sglang_tempered_logprobs_are_detected(model, local):
    engine = remote(FakeSGLang(model, original_logprob=False), "sglang", local)
    assert not engine.raw_when_sampling
    assert engine.client_side_reason(SamplingSettings(temperature=0.5)) is not None
    assert engine.client_side_reason(GREEDY) is None


# --- llama-server shapes (the live server is in test_remote_llamacpp.py) -----------------------------


def test_llamacpp_token_left_out_of_the_stream_is_fetched(model, local):
    """llama-server sends no event for a token that ends inside a UTF-8 character: the adapter
    notices the jump in tokens_predicted and asks for that token in a one-token request."""
    server = FakeLlamaServer(model, skip_at={2})
    engine = remote(server, "llama.cpp", local, top_n=10)
    request = ChatRequest([{"role": "user", "content": "Hi!"}], settings=GREEDY, max_new_tokens=6)
    ours, reference = run_chat(engine, request), run_chat(local, request)
    assert ours.answer_ids == reference.answer_ids
    assert [t.logprob for t in ours.tokens] == pytest.approx([t.logprob for t in reference.tokens], abs=1e-5)
    streams = [body for body in server.requests if body.get("stream")]
    assert len(streams) >= 2 and streams[0]["samplers"][1] == "temperature" and streams[0]["top_k"] == 0


def test_llamacpp_requests_send_the_whole_sampler_chain(model, local):
    server = FakeLlamaServer(model)
    engine = remote(server, "llama.cpp", local, top_n=10)
    StepSession(engine, PROMPT).candidates(3)
    body = server.requests[-1]
    assert body["prompt"] == list(local.tokenizer(PROMPT).input_ids) and body["n_probs"] == 10
    assert (body["top_k"], body["top_p"], body["min_p"], body["repeat_penalty"]) == (0, 1.0, 0.0, 1.0)
    assert not body["post_sampling_probs"] and body["cache_prompt"]


# --- failures, the tokenizer check, settings --------------------------------------------------------------


def test_tokenizer_mismatch_is_a_clear_error(model, local):
    class Shifted(FakeVLLM):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            response = super().__call__(request)
            if request.url.path == "/tokenize":
                data = response.json()
                return httpx.Response(200, json={**data, "tokens": [t + 1 for t in data["tokens"]]})
            return response

    with pytest.raises(PlaygroundError, match="Tokenizer mismatch"):
        remote(Shifted(model), "vllm", local)


def test_down_engine_timeout_and_http_error_are_clear(local):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(EngineUnavailable, match=r"Cannot reach the llama\.cpp server.*Is it running"):
        connect(f"http://127.0.0.1:{port}", "llama.cpp", tokenizer=local.tokenizer)

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(EngineUnavailable, match="did not answer within 7 s"):
        connect(
            "http://x:1", "vllm", tokenizer=local.tokenizer, timeout=7, transport=httpx.MockTransport(slow)
        )
    broken = httpx.MockTransport(
        lambda r: httpx.Response(500, json={"error": {"message": "CUDA out of memory"}})
    )
    with pytest.raises(EngineUnavailable, match=r"HTTP 500\): CUDA out of memory"):
        connect("http://x:1", "sglang", tokenizer=local.tokenizer, transport=broken)
    with pytest.raises(PlaygroundError, match="Unknown engine 'tgi'"):
        connect("http://x:1", "tgi")


def test_app_options_and_variables(monkeypatch):
    import app

    settings = app.parse_args(["--engine", "vllm", "--engine-url", "http://gpu:8000", "--engine-top-n", "7"])
    assert (settings.engine, settings.engine_url, settings.engine_top_n) == ("vllm", "http://gpu:8000", 7)
    monkeypatch.setenv("PLAYGROUND_ENGINE", "llama.cpp")
    monkeypatch.setenv("PLAYGROUND_ENGINE_TIMEOUT", "9")
    settings = app.parse_args([])
    assert (settings.engine, settings.engine_url, settings.engine_timeout) == ("llama.cpp", None, 9)
    with pytest.raises(PlaygroundError, match="needs --engine-url"):
        app.create_engine(settings)


def test_prometheus_parser_reads_labels_and_values():
    text = (
        '# HELP x\nvllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
        "plain_metric 3\nbad line\n"
    )
    assert parse_prometheus(text) == [
        ("vllm:cache_config_info", {"block_size": "16", "num_gpu_blocks": "None"}, 1.0),
        ("plain_metric", {}, 3.0),
    ]
    assert math.isclose(parse_prometheus('a{b="c"} 2.5e-1')[0][2], 0.25)


def test_remembered_distributions_make_undo_and_branches_free(model, local):
    """An undo, a branch switch or a fork costs no request; a pick costs one."""
    server = FakeVLLM(model)
    session = StepSession(remote(server, "vllm", local), PROMPT)
    first = session.candidates(5)
    count = len(server.requests)
    session.pick(first[0].token_id)
    assert len(server.requests) == count + 1
    session.candidates(5)
    session.undo()
    assert [c.token_id for c in session.candidates(5)] == [c.token_id for c in first]
    session.switch_to(session.branches()[0].node_id)
    session.candidates(5)
    session.engine.fork(session.key, "copy")
    session.engine.sync("copy", session.ids)
    assert len(server.requests) == count + 1


def test_settings_vllm_cannot_sample_are_sampled_here(model, local):
    server = FakeVLLM(model)
    engine = remote(server, "vllm", local)
    settings = SamplingSettings(temperature=0.9, typical_p=0.8)
    assert "typical-p" in engine.client_side_reason(settings)
    request = ChatRequest([{"role": "user", "content": "Hi!"}], settings=settings, max_new_tokens=3, seed=2)
    before = len(server.requests)
    update = run_chat(engine, request)
    assert len(server.requests) - before == 3 and not any(b.get("stream") for b in server.requests[before:])
    assert all(0 < t.sampled_prob <= 1 for t in update.tokens)


def test_event_stream_reading():
    """SSE: comments and blank lines skipped, [DONE] ends, an error event is a clear error."""
    body = (
        b': ping\n\ndata: {"a": 1}\n\nevent: x\ndata: {"a": -Infinity}\n\ndata: [DONE]\n\ndata: {"a": 3}\n\n'
    )
    client = HttpClient(
        "http://x",
        "the test server",
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=body)),
    )
    assert list(client.stream_events("/s", {})) == [{"a": 1}, {"a": -math.inf}]
    failing = b'data: {"a": 1}\n\ndata: {"error": {"message": "context full", "code": 400}}\n\n'
    client = HttpClient(
        "http://x",
        "the test server",
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=failing)),
    )
    with pytest.raises(EngineUnavailable, match="stopped with an error: context full"):
        list(client.stream_events("/s", {}))


@pytest.mark.parametrize("token", [17, 400])  # inside and outside the top 10
def test_describe_top_equals_describe_rows_on_the_same_top_n(local, token):
    from playground.engine.records import describe_rows, describe_top

    lp = torch.log_softmax(torch.randn(local.vocab_size, generator=torch.Generator().manual_seed(1)), -1)
    lp[17] = lp.max() + 0.5  # token 17 is the most likely
    top = torch.topk(lp, 10)
    row = torch.full_like(lp, -math.inf)
    row[top.indices] = top.values
    row[token] = lp[token]
    dense = describe_rows(local.tokenizer, row.unsqueeze(0), [token], complete=False, rank_limit=10)[0]
    sparse = describe_top(
        local.tokenizer, top.indices.tolist(), top.values.tolist(), token, float(lp[token]), rank_limit=10
    )
    assert (sparse.id, sparse.rank, sparse.top) == (dense.id, dense.rank, dense.top)
    assert (sparse.logprob, sparse.entropy) == pytest.approx((dense.logprob, dense.entropy), abs=1e-5)
    assert sparse.rank == (1 if token == 17 else None)
