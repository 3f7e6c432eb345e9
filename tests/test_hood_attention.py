"""Attention maps: equal to transformers' eager output_attentions, causal, normalised; the app's
model keeps its fast attention; over-long text refused clearly."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hood_helpers import eager_reference

from playground.errors import PlaygroundError
from playground.hood import attention as attention_lesson
from playground.hood.attention import MAX_TOKENS, attention_maps

TEXT = "The cat sat on the mat because it was warm, and the dog watched it from the door."


def assert_attention_laws(maps: torch.Tensor, layers: int, heads: int, seq: int) -> None:
    assert maps.shape == (layers, heads, seq, seq)
    above = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
    assert torch.all(maps[..., above] == 0)  # a token never sees the future: exactly 0
    assert torch.allclose(maps.sum(dim=-1), torch.ones(layers, heads, seq), atol=1e-5)


def test_embedded_maps_equal_eager_output_attentions(embedded_lm):
    ids = embedded_lm.tokenizer(TEXT).input_ids
    maps = attention_maps(embedded_lm, ids)
    reference = eager_reference(embedded_lm)
    with torch.inference_mode():
        expected = reference(torch.tensor([ids]), output_attentions=True, use_cache=False).attentions
    assert torch.allclose(maps, torch.stack([a[0] for a in expected]), atol=1e-5, rtol=0)
    assert_attention_laws(maps, 30, 9, len(ids))


def test_app_model_keeps_its_fast_attention_and_shares_weights(embedded_lm):
    ids = embedded_lm.tokenizer(TEXT).input_ids
    before = embedded_lm.prefill(ids)
    attention_maps(embedded_lm, ids)
    assert embedded_lm.model.config._attn_implementation == "sdpa"
    assert torch.equal(embedded_lm.prefill(ids), before)
    twin = embedded_lm.twins.eager()
    assert twin.config._attn_implementation == "eager"
    assert twin.lm_head.weight.data_ptr() == embedded_lm.model.lm_head.weight.data_ptr()
    assert twin.model.layers[3].mlp.up_proj.weight is embedded_lm.model.model.layers[3].mlp.up_proj.weight


def test_tiny_model_maps_equal_eager_and_obey_the_mask(tiny_lm):
    ids = list(range(5, 45))
    maps = attention_maps(tiny_lm, ids)
    config = type(tiny_lm.config)(**{**tiny_lm.config.to_dict(), "attn_implementation": "eager"})
    reference = type(tiny_lm.model)(config).eval()
    reference.load_state_dict(tiny_lm.model.state_dict())
    with torch.inference_mode():
        expected = reference(torch.tensor([ids]), output_attentions=True).attentions
    assert torch.allclose(maps, torch.stack([a[0] for a in expected]), atol=1e-5, rtol=0)
    assert_attention_laws(maps, 2, 4, len(ids))


def test_view_labels_tokens_and_finds_the_sink(embedded_lm):
    view = attention_lesson.run(embedded_lm, embedded_lm.tokenizer(TEXT).input_ids)
    assert len(view.tokens) == view.maps.shape[-1] and view.tokens[1] == "␣cat"
    share = view.sink_share()
    assert share.shape == (30, 9)
    # the embedded model parks its attention on the first token in its middle layers, far more
    # than an even spread over the visible keys would put there
    assert share[10:20].mean() > 2.5 * view.uniform_share()
    assert 0.1 < view.uniform_share() < 0.3
    row = view.query_row(5, 2, 3)
    assert row[4:] == [0.0] * (len(view.ids) - 4) and abs(sum(row) - 1) < 1e-5
    mean_row = view.query_row(5, None, 3)
    assert abs(sum(mean_row) - 1) < 1e-5
    assert view.thumbnails(8).shape == (30, 9, 8, 8)


def test_over_long_text_is_refused_with_the_cap(tiny_lm):
    with pytest.raises(PlaygroundError, match=rf"at most {MAX_TOKENS} tokens and this text has 300"):
        attention_maps(tiny_lm, list(range(300)))
    with pytest.raises(PlaygroundError, match="empty"):
        attention_maps(tiny_lm, [])
    assert attention_maps(tiny_lm, list(range(300)), max_tokens=300).shape[-1] == 300


def test_an_engine_without_attentions_says_why(tiny_lm):
    caps = dataclasses.replace(
        tiny_lm.capabilities, attentions=False, reasons={"attentions": "llama-server has none"}
    )

    class NoAttention:
        capabilities = caps

    with pytest.raises(PlaygroundError, match="llama-server has none"):
        attention_maps(NoAttention(), [1, 2, 3])


def test_a_remote_engine_is_told_to_run_the_model_in_process(tiny_lm):
    class Remote:
        kind = "llama.cpp"
        capabilities = dataclasses.replace(tiny_lm.capabilities, probes=False)

    message = r"llama\.cpp engine does not expose: start the app .*without --engine"
    with pytest.raises(PlaygroundError, match=message):
        attention_maps(Remote(), [1, 2, 3])
