"""The second embedded model, Gemma 3 270M, on the real weights: it loads offline from its pip packages
(converted once, then from the cache), chat on it (a base model) equals generate and says why it only
continues the text, its hybrid sliding-window KV cache measures what the formula says, the running
batch gives each request the tokens it gets alone (prompts past the 512-token window), beam search
equals generate, and every lesson runs on it or says clearly why not."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from hood_helpers import generate_greedy

from playground import hood
from playground.beam import beam_search
from playground.chat import NO_TEMPLATE_NOTE, ChatRequest, run_chat
from playground.engine import DecodePlan
from playground.engine.batcher import BatchConfig
from playground.engine.embedded import EMBEDDED_MODELS
from playground.engine.loading import embedded_cache_dir, verify_cache
from playground.engine.local import LocalEngine
from playground.engine.sampling import SamplingSettings
from playground.errors import PlaygroundError
from playground.hood.common import LONG_TEXT, preset_ids
from playground.kv import measure_vs_predicted
from playground.models.estimate import EMBEDDED_PARAMETERS
from playground.settings import load_settings
from tests.test_beam import assert_parity

GREEDY = SamplingSettings(temperature=0)
WINDOW = 512


def test_gemma_loads_offline_from_its_packages_and_its_cache(gemma_lm):
    spec = EMBEDDED_MODELS["gemma-3-270m"]
    cache = embedded_cache_dir(Path(load_settings().cache_dir), "gemma-3-270m")
    assert verify_cache(cache) is None  # the converted weights and tokenizer, checksummed
    assert type(gemma_lm.model).__name__ == "Gemma3ForCausalLM" and gemma_lm.name == spec.title
    assert gemma_lm.num_parameters == EMBEDDED_PARAMETERS["gemma-3-270m"] == 268_098_176
    assert not gemma_lm.has_chat_template and gemma_lm.vocab_size == 262_144
    layer_types = gemma_lm.config.layer_types
    assert layer_types[:6] == ["sliding_attention"] * 5 + ["full_attention"]
    assert gemma_lm.config.sliding_window == WINDOW
    ids = gemma_lm.tokenizer("今天天气很好").input_ids
    assert gemma_lm.tokenizer.convert_ids_to_tokens(ids) == ["<bos>", "今天", "天气", "很好"]


def test_a_cached_load_reads_the_cache_in_seconds(gemma_lm):
    from playground.engine.loading import load_model

    started = time.perf_counter()
    again = load_model("gemma-3-270m", device="cpu", batching="off")
    assert again.source == "cache" and time.perf_counter() - started < 60
    assert again.model.state_dict()["lm_head.weight"].equal(gemma_lm.model.state_dict()["lm_head.weight"])


@pytest.mark.parametrize("model", ["embedded_lm", "gemma_lm"])
def test_greedy_chat_equals_generate_on_each_model(model, request):
    lm = request.getfixturevalue(model)
    question = [{"role": "user", "content": "今天天气很好，"}]
    answer = run_chat(lm, ChatRequest(question, settings=GREEDY, max_new_tokens=12))
    assert answer.answer_ids == generate_greedy(lm, answer.prompt_ids, 12)[: len(answer.answer_ids)]
    assert (NO_TEMPLATE_NOTE in answer.notes) is (model == "gemma_lm")


def test_gemma_continues_chinese_text(gemma_lm):
    question = [{"role": "user", "content": "今天天气很好，"}]
    answer = run_chat(gemma_lm, ChatRequest(question, settings=GREEDY, max_new_tokens=6))
    assert answer.prompt_ids == gemma_lm.tokenizer("今天天气很好，").input_ids  # the text itself, no template
    assert answer.text.startswith("天气好，我喜欢")  # measured: 天气好，我喜欢吃水果，…


@pytest.mark.parametrize("tokens", [100, 600, 1000])
def test_measured_kv_bytes_equal_the_formula_on_the_hybrid_cache(gemma_lm, tokens):
    m = measure_vs_predicted(gemma_lm, tokens)
    assert m.equal and m.measured_bytes == m.predicted.total_bytes
    layer_types = gemma_lm.config.layer_types
    held = [layer.tokens for layer in m.predicted.layers]
    for kind, kept in zip(layer_types, held, strict=True):
        assert kept == (tokens if kind == "full_attention" else min(tokens, WINDOW - 1))
    per_token = 2 * 1 * 256 * 4  # K and V x 1 KV head x head_dim 256 x float32
    assert m.measured_layers[5] == per_token * tokens  # a full-attention layer keeps every token


@pytest.fixture(scope="module")
def gemma_unbatched(gemma_lm) -> LocalEngine:
    lm = gemma_lm
    return LocalEngine(lm.model, lm.tokenizer, lm.device, lm.dtype, lm.name, batching=BatchConfig("off"))


def _greedy_ids(engine, ids: list[int], n: int) -> list[int]:
    return [r.id for r in engine.stream(ids, DecodePlan(GREEDY, n, seed=0)) if hasattr(r, "id")]


def test_batched_gemma_streams_equal_their_solo_runs_past_the_window(gemma_lm, gemma_unbatched):
    assert "Batching: continuous" in gemma_lm.batching_line
    prompts = [
        preset_ids(gemma_lm.tokenizer, 600),  # read in chunks past the 512-token window
        preset_ids(gemma_lm.tokenizer, 530)[7:],
        gemma_lm.tokenizer("今天天气很好，").input_ids,
    ]
    alone = [_greedy_ids(gemma_unbatched, p, 10) for p in prompts]
    assert alone == [generate_greedy(gemma_lm, p, 10) for p in prompts]  # alone = plain transformers
    before = gemma_lm.batcher.iterations
    results: dict[int, list[int]] = {}

    def user(i: int) -> None:
        time.sleep(0.3 * i)
        results[i] = _greedy_ids(gemma_lm, prompts[i], 10)

    threads = [threading.Thread(target=user, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert [results[i] for i in range(len(prompts))] == alone
    log = [it for it in gemma_lm.batcher.log if it.index >= before]
    assert max(len(it.jobs) for it in log) >= 2  # really batched together


def test_seeded_batched_streams_equal_their_solo_runs(gemma_lm, gemma_unbatched):
    hot = SamplingSettings(temperature=0.9, top_k=50)
    question = [{"role": "user", "content": "Once upon a time"}]
    requests = [ChatRequest(question, settings=hot, max_new_tokens=8, seed=s) for s in (1, 2)]
    alone = [run_chat(gemma_unbatched, r).answer_ids for r in requests]
    results: dict[int, list[int]] = {}
    threads = [
        threading.Thread(
            target=lambda i=i: results.__setitem__(i, run_chat(gemma_lm, requests[i]).answer_ids)
        )
        for i in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert [results[0], results[1]] == alone and alone[0] != alone[1]


def test_beam_search_equals_generate_past_the_window(gemma_lm):
    tree = beam_search(gemma_lm, (LONG_TEXT * 4)[:2600], 3, 5)
    assert len(tree.prompt_ids) > WINDOW
    assert_parity(gemma_lm, tree)


# --- every lesson on Gemma, or a clear reason -------------------------------------------------------


def _ids(lm, text: str = "The capital of France is") -> list[int]:
    return lm.tokenizer(text).input_ids


def test_the_quick_lessons_run_on_gemma(gemma_lm):
    ids = _ids(gemma_lm)
    tokens = hood.tokens.tokenize(gemma_lm, "今天天气很好")
    assert [t.piece for t in tokens] == ["今天", "天气", "很好"]
    assert hood.attention.attention_maps(gemma_lm, ids).shape == (18, 4, 6, 6)
    lens = hood.lens.logit_lens(gemma_lm, ids)
    assert lens.shape == (18, 262_144)
    order = hood.sampling_order.run(gemma_lm, ids, SamplingSettings(temperature=0.7, top_k=20))
    assert order.raw.shape == (262_144,) and len(order.kept_before) == 20
    reference = ids + gemma_lm.tokenizer(" Paris.", add_special_tokens=False).input_ids
    tf = hood.teacher_forcing.run(gemma_lm, reference, len(ids))
    assert len(tf.logprobs) == len(reference) - len(ids)


def test_the_cost_and_serving_lessons_run_on_gemma(gemma_lm):
    kv = hood.kv_on_off.run(gemma_lm, preset_ids(gemma_lm.tokenizer, 200), new_tokens=3)
    assert kv.identical and kv.bytes_match
    batch = hood.batching.run(gemma_lm, [_ids(gemma_lm), _ids(gemma_lm, "Once upon a time")], new_tokens=3)
    assert batch.identical
    spec = hood.speculative.run(gemma_lm, _ids(gemma_lm), 4, method="prompt_lookup", compare=True)
    assert spec.identical


def test_speculative_decoding_says_why_gemma_cannot_draft_for_smollm2(embedded_lm, gemma_lm):
    with pytest.raises(
        PlaygroundError, match=r"different tokenizer .*262,144 tokens.*must share one tokenizer"
    ):
        hood.speculative.run(embedded_lm, _ids(embedded_lm), 4, method="draft", draft=gemma_lm)


def test_a_quantized_kv_cache_is_refused_with_the_reason_on_sliding_layers(gemma_lm):
    with pytest.raises(PlaygroundError, match=r"KV int4 .*cannot be built for this model.*sliding_attention"):
        hood.quantization.run(gemma_lm, _ids(gemma_lm), kv="int4", new_tokens=2)


# --- the app on Gemma (./run.sh --model gemma-3-270m) ----------------------------------------------


@pytest.fixture(scope="module")
def gemma_client(gemma_lm):
    from gradio_client import Client

    from playground.ui.app import build_demo, launch_local, launch_options

    demo = build_demo(gemma_lm, load_settings())
    url = launch_local(demo, **launch_options())
    yield Client(url, verbose=False)
    demo.close()


def test_the_app_chats_steps_and_measures_on_gemma(gemma_lm, gemma_client):
    _, history, _, stats, _ = gemma_client.predict(
        "今天天气很好，", temperature=0, max_new_tokens=6, api_name="/chat"
    )
    text = str(history[-1]["content"])
    assert "天气好，我喜欢" in text and "no chat template: a base model continues your text" in stats
    result, table = gemma_client.predict(600, api_name="/kv_measure")
    assert "equal to the byte" in result and all(row[4] for row in table["data"]) and len(table["data"]) == 18
    gemma_client.predict(prompt="The capital of France is", chat=False, api_name="/step_start")
    step = gemma_client.predict(api_name="/step_greedy")
    ledger = step[6]["data"]
    assert ledger[0][2] == "greedy" and len(ledger) == 1
