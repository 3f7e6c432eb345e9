"""Logit lens: the last row is the model's own next-token distribution, the others the final norm
and head on each layer's hidden state (never normed twice); tracks, ranks and settling."""

from __future__ import annotations

import pytest
import torch

from playground.errors import PlaygroundError
from playground.hood import lens as lens_lesson
from playground.hood.lens import LensView, Track, logit_lens

PREFIX = "The capital of France is"


def reference_rows(lm, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(final softmax (vocab,), norm + head on every hidden state but the last (layers - 1, vocab)),
    straight from transformers' outputs."""
    model = lm.model
    with torch.inference_mode():
        out = model(torch.tensor([ids]), output_hidden_states=True, use_cache=False)
        middle = torch.stack([model.lm_head(model.model.norm(h[0, -1])) for h in out.hidden_states[1:-1]])
    return torch.softmax(out.logits[0, -1], -1), torch.softmax(middle, -1)


@pytest.mark.parametrize("which", ["embedded_lm", "tiny_lm"])
def test_rows_are_the_final_softmax_and_norm_head_per_layer(which, request):
    lm = request.getfixturevalue(which)
    ids = lm.tokenizer(PREFIX).input_ids
    probs = logit_lens(lm, ids)
    final, middle = reference_rows(lm, ids)
    layers = lm.config.num_hidden_layers
    assert probs.shape == (layers, lm.vocab_size)
    assert torch.allclose(probs[-1], final, atol=1e-5, rtol=0)
    assert torch.allclose(probs[:-1], middle, atol=1e-5, rtol=0)
    assert torch.allclose(probs.sum(-1), torch.ones(layers), atol=1e-4)


def test_the_last_hidden_state_is_not_normed_twice(embedded_lm):
    """The trap: norming transformers' last hidden state again gives a different distribution."""
    ids = embedded_lm.tokenizer(PREFIX).input_ids
    model = embedded_lm.model
    with torch.inference_mode():
        last = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0, -1]
        twice = torch.softmax(model.lm_head(model.model.norm(last)), -1)
    probs = logit_lens(embedded_lm, ids)
    assert (probs[-1] - twice).abs().max() > 1e-3


def test_long_prefix_is_read_in_chunks_with_the_same_answer(tiny_lm):
    ids = list(range(10, 10 + 2 * tiny_lm.forwarder.prefill_chunk - 30))  # two chunks
    final, middle = reference_rows(tiny_lm, ids)
    probs = logit_lens(tiny_lm, ids)
    assert torch.allclose(probs[-1], final, atol=1e-5) and torch.allclose(probs[:-1], middle, atol=1e-5)


def test_view_tracks_chosen_token_and_candidates(embedded_lm):
    ids = embedded_lm.tokenizer(PREFIX).input_ids
    paris = embedded_lm.tokenizer(" Paris", add_special_tokens=False).input_ids[0]
    view = lens_lesson.run(embedded_lm, ids, candidates=[paris, 11])
    assert view.chosen.id == int(view.probs[-1].argmax()) and view.chosen.ranks[-1] == 1
    assert [t.id for t in view.candidates] == [paris, 11] or view.chosen.id == paris
    for t in view.candidates:
        column = view.probs[:, t.id]
        assert t.probs == pytest.approx(column.tolist())
        assert t.ranks == [int((row > row[t.id]).sum()) + 1 for row in view.probs]
    assert len(view.top) == 30 and view.top[-1][0][:2] == (view.chosen.id, view.chosen.visible)
    assert 1 <= view.settles_at <= 30 and all(r == 1 for r in view.chosen.ranks[view.settles_at - 1 :])


def test_settling_layer_is_the_start_of_the_final_run_of_rank_one():
    def view(ranks):
        track = Track(1, "x", [0.5] * len(ranks), ranks)
        return LensView([1], torch.zeros(len(ranks), 2), track, [])

    assert view([5, 1, 3, 1, 1]).settles_at == 4
    assert view([1, 1, 1]).settles_at == 1
    assert view([9, 9, 1]).settles_at == 3


def test_bad_input(tiny_lm):
    with pytest.raises(PlaygroundError, match="empty"):
        logit_lens(tiny_lm, [])
    with pytest.raises(PlaygroundError, match="outside the vocabulary"):
        lens_lesson.run(tiny_lm, [5, 6], candidates=[10**9])


def test_early_exit_twin_is_norm_and_head_after_k_layers(embedded_lm):
    """The early-exit draft's logits are the lens row of layer k."""
    ids = embedded_lm.tokenizer(PREFIX).input_ids
    sequence = embedded_lm.probes.sequence(exit_layer=12)
    rows, _ = sequence.advance(ids)
    assert len(sequence.cache.layers) == 12
    lens = logit_lens(embedded_lm, ids)
    assert torch.allclose(torch.softmax(rows[-1], -1), lens[11], atol=1e-5)
