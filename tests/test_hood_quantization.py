"""Quantization on the real embedded model: each format's KL equals the KL recomputed from the two
models' own logits, quality falls as bits go down, the reference is greedy `generate`, a quantized
cache holds exactly the KV tab's bytes, and bad input gets one clear line."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from hood_helpers import generate_greedy
from transformers import DynamicCache, QuantizedCache

from playground.chat import ChatRequest, run_chat
from playground.engine.control import run_to_end
from playground.engine.kv_quant import KV_FORMATS, cache_bytes, kv_format, quantized_cache
from playground.engine.loading import load_model
from playground.engine.quantize import weight_format
from playground.engine.sampling import SamplingSettings
from playground.errors import PlaygroundError
from playground.hood import quantization as quantization_lesson
from playground.hood.quantization import MAX_TEXT_TOKENS, Rung, quantized_weights
from playground.kv import kv_cache_bytes
from playground.ui.app import header_markdown
from playground.ui.kv_measured_quant import measure_quantized

TEXT = "The printing press spread across Europe within fifty years."
NEW = 6
WEIGHTS = ("hqq8", "hqq4", "hqq3", "hqq2", "int8")
CACHES = ("fp8", "int8", "int4", "int2")


def kl_from_logits(reference: torch.Tensor, quantized: torch.Tensor) -> list[float]:
    """KL(reference ‖ quantized) per row, in float64, written out independently of the lesson."""
    p = torch.log_softmax(reference.double(), -1)
    q = torch.log_softmax(quantized.double(), -1)
    return torch.nn.functional.kl_div(q, p, log_target=True, reduction="none").sum(-1).tolist()


def forward_cached(lm, model, cache, text: list[int], continuation: list[int]) -> torch.Tensor:
    """Plain transformers: the text in one forward, then the continuation one token per forward
    (as the lesson reads them), each row's logits."""
    with lm.lock, torch.inference_mode():
        rows = [model(torch.tensor([text]), past_key_values=cache, use_cache=True).logits[0]]
        for token in continuation[:-1]:
            rows.append(model(torch.tensor([[token]]), past_key_values=cache, use_cache=True).logits[0])
    return torch.cat(rows)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One thread: on a shared 2-core machine token-by-token decoding is several times faster so."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def text_ids(embedded_lm) -> list[int]:
    return list(embedded_lm.tokenizer(TEXT).input_ids)


@pytest.fixture(scope="module")
def measured(embedded_lm, text_ids):
    """Every format against the model in one ladder (copies made beforehand, so that their logits
    can be recomputed), with the KL recomputed from the two models' own logits."""
    copies = {name: quantized_weights(embedded_lm, name) for name in WEIGHTS}
    try:
        ladder = [Rung(copy, None) for copy in copies.values()] + [f"kv-{name}" for name in CACHES]
        run = run_to_end(quantization_lesson.iter_run(embedded_lm, text_ids, ladder, NEW))
        results = {r.key: r for r in run.results}
        continuation = run.reference_ids
        reference = forward_cached(embedded_lm, embedded_lm.model, DynamicCache(), text_ids, continuation)
        out = {}
        for name, copy in copies.items():
            quantized = forward_cached(embedded_lm, copy.model, DynamicCache(), text_ids, continuation)
            out[name] = (results[name], kl_from_logits(reference, quantized))
    finally:
        for copy in copies.values():
            copy.free()
    for name in CACHES:
        fmt = kv_format(name)
        cache = QuantizedCache(fmt.backend, embedded_lm.config, **fmt.options)
        quantized = forward_cached(embedded_lm, embedded_lm.model, cache, text_ids, continuation)
        out[f"kv-{name}"] = (results[f"kv-{name}"], kl_from_logits(reference, quantized))
    return out


@pytest.mark.parametrize("key", [*WEIGHTS, *(f"kv-{c}" for c in CACHES)])
def test_kl_equals_kl_recomputed_from_both_models_logits(measured, text_ids, key):
    result, again = measured[key]
    assert len(result.kl) == len(text_ids) - 1 + len(result.reference_ids) == len(again)
    assert result.kl == pytest.approx(again, abs=1e-5)
    assert 0 <= result.top1_agreement <= 1 and result.tok_s[0] > 0 and result.tok_s[1] > 0
    if key.startswith("kv-"):  # the text is read in one forward: the cache changes nothing there
        assert (
            max(result.kl[: len(text_ids) - 1]) < 1e-6
            and result.weight_bytes == result.reference_weight_bytes
        )
    else:
        assert result.weight_bytes < result.reference_weight_bytes


@pytest.mark.parametrize("ladder", [("hqq8", "hqq4", "hqq2"), ("kv-int8", "kv-int4", "kv-int2")])
def test_kl_grows_and_top1_falls_as_bits_go_down(measured, ladder):
    results = [measured[key][0] for key in ladder]
    kls = [r.mean_kl for r in results]
    top1 = [r.top1_agreement for r in results]
    assert kls[0] < kls[1] < kls[2], kls
    assert top1[0] >= top1[1] >= top1[2] and top1[0] > top1[2], top1
    assert results[0].bits > results[1].bits > results[2].bits


def test_reference_continuation_is_greedy_generate_and_the_fork_is_the_copy_s_own(
    embedded_lm, measured, text_ids
):
    result = measured["hqq2"][0]
    assert result.reference_ids == generate_greedy(embedded_lm, text_ids, NEW)[: len(result.reference_ids)]
    assert result.first_divergence is not None  # 2 bits: this model's continuation leaves at once
    at = result.first_divergence
    assert result.quantized_ids[:at] == result.reference_ids[:at]
    assert result.quantized_ids[at] != result.reference_ids[at] and len(result.quantized_ids) >= at + 1


@pytest.mark.parametrize("name", CACHES)
@pytest.mark.parametrize("tokens", [37, 64])
def test_quantized_cache_bytes_equal_the_kv_tab_formula(embedded_lm, name, tokens):
    """The prompt is quantized whole at prefill: every token is held in the format, scales included."""
    cache = quantized_cache(embedded_lm.config, kv_format(name), embedded_lm.device)
    with embedded_lm.lock, torch.inference_mode():
        embedded_lm.model(torch.arange(100, 100 + tokens)[None], past_key_values=cache, use_cache=True)
    held = cache_bytes(cache)
    assert (held.quantized_tokens, held.residual_tokens) == (tokens, 0)
    formula = kv_cache_bytes(embedded_lm.config, tokens, 1, name, "transformers", scale_dtype="float32")
    assert held.total == formula
    assert formula < kv_cache_bytes(embedded_lm.config, tokens, 1, "float32", "transformers")


def test_kv_results_bytes_match_their_formula(measured):
    for name in CACHES:
        result = measured[f"kv-{name}"][0]
        assert result.kv_bytes == result.kv_formula_bytes < result.reference_kv_bytes


def test_unavailable_formats_name_the_library_and_the_device():
    mps = torch.device("mps")
    assert "hqq" in weight_format("hqq4").missing(mps) and "mps" in weight_format("hqq4").missing(mps)
    why = kv_format("int4").missing(torch.device("xpu"))
    assert "optimum-quanto" in why and "xpu" in why
    with pytest.raises(PlaygroundError, match="Unknown weights format 'int3'"):
        weight_format("int3")
    assert set(KV_FORMATS) == set(CACHES)


def test_a_copy_too_big_for_the_free_memory_is_refused_before_it_is_made(embedded_lm, text_ids, monkeypatch):
    monkeypatch.setattr(embedded_lm.probes, "free_memory_bytes", lambda: 40 * 2**20)
    with pytest.raises(PlaygroundError, match=r"needs about [\d,]+ MiB .* only 40 MiB are free on cpu"):
        quantization_lesson.run(embedded_lm, text_ids, weights="hqq4", new_tokens=2)


def test_bad_text_and_engines_get_one_clear_line(embedded_lm, monkeypatch):
    with pytest.raises(PlaygroundError, match="The text is empty"):
        quantization_lesson.run(embedded_lm, [], weights="hqq4")
    with pytest.raises(PlaygroundError, match=f"at most {MAX_TEXT_TOKENS}"):
        quantization_lesson.run(embedded_lm, [100] * (MAX_TEXT_TOKENS + 1), weights="hqq4")
    with pytest.raises(PlaygroundError, match="Name a weights format"):
        quantization_lesson.run(embedded_lm, [100, 200])
    capabilities = replace(embedded_lm.capabilities, probes=False, reasons={"probes": "a remote server"})
    remote = SimpleNamespace(**{**vars(embedded_lm), "capabilities": capabilities, "kind": "llama.cpp"})
    with pytest.raises(PlaygroundError, match="a remote server"):
        quantization_lesson.run(remote, [100, 200], kv="int4")
    monkeypatch.setattr(embedded_lm, "quantization", "int8", raising=False)
    with pytest.raises(PlaygroundError, match="--quantize int8"):
        quantization_lesson.run(embedded_lm, [100, 200], kv="int4")


@pytest.mark.parametrize("name", CACHES)
def test_kv_tab_builds_a_quantized_cache_and_shows_its_bytes_next_to_the_formula(embedded_lm, name):
    shown = measure_quantized(embedded_lm, name, 45)
    assert "equal to the byte" in shown["measured_quant"] and f"### {name} cache" in shown["measured_quant"]
    rows = shown["measure_quant_table"]
    assert len(rows) == 30 and all(row[3] for row in rows)
    formula = kv_cache_bytes(embedded_lm.config, 45, 1, name, "transformers", scale_dtype="float32")
    assert sum(row[2] for row in rows) == formula
    with pytest.raises(PlaygroundError, match="Prompt length must be 1 to 8,192"):
        measure_quantized(embedded_lm, name, 0)


def test_quantize_int8_serves_the_app_on_quantized_weights_and_the_header_says_so(embedded_lm):
    served = load_model(device="cpu", quantize="int8")
    header = header_markdown(served)
    assert served.quantization == "int8" and "torchao int8 (torchao, --quantize int8)" in header
    assert "220 MB of tensors, 538 MB as loaded" in header
    linear = served.model.get_submodule("model.layers.0.self_attn.q_proj")
    assert "Int8" in type(linear.weight).__name__  # a torchao quantized tensor, not float32
    batched = served.batcher.model.get_submodule("model.layers.0.self_attn.q_proj")
    assert "Int8" in type(batched.weight).__name__  # the running batch's twin took the new layers too
    question = [{"role": "user", "content": "What is the capital of France?"}]
    answer = run_chat(
        served, ChatRequest(question, settings=SamplingSettings(temperature=0), max_new_tokens=8)
    )
    assert "Paris" in answer.text  # the whole chat path (batcher, sampling) runs on the int8 weights
    with pytest.raises(PlaygroundError, match="Unknown weights format 'int3'"):
        load_model(device="cpu", quantize="int3")


def test_the_quick_setting_is_three_formats_over_64_tokens_beside_the_recorded_ladder(embedded_lm, tiny_lm):
    """The quick setting reads 64 tokens (60 of the text's, 4 new) in 3 formats; while it runs, the
    whole ladder is shown from the gallery's trace of this model, marked recorded; not for a run of
    the whole ladder, nor for another model."""
    from playground.hood.quantization import LADDER
    from playground.traces import gallery_trace
    from playground.ui.hood.quantization import LADDER_TRACE, QUICK, recorded_ladder

    ids = embedded_lm.tokenizer(QUICK["quant_text"], add_special_tokens=True).input_ids
    assert len(ids) - 1 + QUICK["quant_tokens"] == 64 and len(QUICK["quant_formats"]) == 3
    trace = gallery_trace(LADDER_TRACE)
    assert trace is not None and trace.model == embedded_lm.name
    ladder = recorded_ladder(embedded_lm, QUICK["quant_formats"])
    assert ladder.visible and ladder.label.startswith(f"● the whole ladder, recorded {trace.created[:10]}")
    recorded = next(f["figure"] for f in trace.data["outputs"]["figures"] if f["name"] == "quant_strip")
    rows = {str(label) for t in recorded["data"] for label in t.get("y") or []}
    assert len(rows) >= len(LADDER)  # one row per format of the ladder
    assert not recorded_ladder(embedded_lm, list(LADDER)).visible
    assert not recorded_ladder(tiny_lm, QUICK["quant_formats"]).visible
