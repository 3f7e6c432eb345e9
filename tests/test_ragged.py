"""The batched attention (engine/ragged.py): one TorchScript call per layer writes every sequence's
new keys and values into its own buffers and attends, as one plain attention per sequence does."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from playground.engine.cache import GrowableLayer
from playground.engine.ragged import (
    RaggedCache,
    RaggedPlan,
    Segment,
    _attend,
    attend_segments,
    ragged_attention,
)

HEADS, KV_HEADS, DIM = 6, 2, 8


def _layer(cached: int, generator: torch.Generator) -> GrowableLayer:
    layer = GrowableLayer()
    keys, values = (torch.randn(1, KV_HEADS, cached, DIM, generator=generator) for _ in range(2))
    layer.lazy_initialization(keys, values)
    if cached:
        layer.update(keys, values)
    return layer


def test_one_scripted_call_equals_one_attention_per_sequence():
    """Three sequences packed in one row: a decode (1 token after 9), a first chunk (5 tokens) and
    a later chunk (4 after 7); each output equals plain causal attention over its own keys."""
    g = torch.Generator().manual_seed(0)
    cached, counts = [9, 0, 7], [1, 5, 4]
    layers = [_layer(n, g) for n in cached]
    before = [(layer.keys.clone(), layer.values.clone()) for layer in layers]
    total = sum(counts)
    query = torch.randn(1, HEADS, total, DIM, generator=g)
    key, value = (torch.randn(1, KV_HEADS, total, DIM, generator=g) for _ in range(2))
    starts = [0, 1, 6]
    for layer, n in zip(layers, counts, strict=True):
        layer.reserve(n)
    attend = _attend()
    assert isinstance(attend, torch.jit.ScriptFunction)  # the fast path, not the Python fallback
    keys, values = [layer.buffers[0] for layer in layers], [layer.buffers[1] for layer in layers]
    out = attend(query, key, value, keys, values, starts, counts, [1, 1, 1], cached, None)
    for layer, n in zip(layers, counts, strict=True):
        layer.length += n
    assert out.shape == (1, total, HEADS, DIM)
    for i, (layer, start, n) in enumerate(zip(layers, starts, counts, strict=True)):
        new = slice(start, start + n)
        all_keys = torch.cat([before[i][0], key[:, :, new]], dim=2)
        all_values = torch.cat([before[i][1], value[:, :, new]], dim=2)
        assert torch.equal(layer.keys, all_keys) and torch.equal(layer.values, all_values)
        positions = torch.arange(cached[i] + n)
        mask = positions[None, :] <= positions[cached[i] :, None]  # causal, every cached one seen
        expected = F.scaled_dot_product_attention(
            query[:, :, new], all_keys, all_values, attn_mask=mask, enable_gqa=True
        )
        torch.testing.assert_close(out[:, new], expected.transpose(1, 2), rtol=1e-5, atol=1e-6)


def test_a_segment_of_beam_rows_attends_each_row_over_its_own_keys():
    """A beam search's cache of 3 rows (6 tokens each) takes one token per row beside a plain decode:
    row r's token is written at position 6 of row r and attends over row r only."""
    g = torch.Generator().manual_seed(3)
    beams = _layer(6, g)
    beams.batch_repeat_interleave(3)
    beams._key_buffer = beams._key_buffer + torch.randn(beams._key_buffer.shape, generator=g)  # rows differ
    plain = _layer(4, g)
    before = [(layer.keys.clone(), layer.values.clone()) for layer in (beams, plain)]
    for layer in (beams, plain):
        layer.reserve(1)
    query = torch.randn(1, HEADS, 4, DIM, generator=g)
    key, value = (torch.randn(1, KV_HEADS, 4, DIM, generator=g) for _ in range(2))
    keys, values = [beams.buffers[0], plain.buffers[0]], [beams.buffers[1], plain.buffers[1]]
    out = _attend()(query, key, value, keys, values, [0, 3], [3, 1], [3, 1], [6, 4], None)
    beams.length, plain.length = 7, 5
    for row in range(3):
        row_keys = torch.cat([before[0][0][row : row + 1], key[:, :, row : row + 1]], dim=2)
        row_values = torch.cat([before[0][1][row : row + 1], value[:, :, row : row + 1]], dim=2)
        assert torch.equal(beams.keys[row : row + 1], row_keys)
        expected = F.scaled_dot_product_attention(
            query[:, :, row : row + 1], row_keys, row_values, enable_gqa=True
        )
        torch.testing.assert_close(out[:, row : row + 1], expected.transpose(1, 2), rtol=1e-5, atol=1e-6)
    plain_keys = torch.cat([before[1][0], key[:, :, 3:]], dim=2)
    plain_values = torch.cat([before[1][1], value[:, :, 3:]], dim=2)
    expected = F.scaled_dot_product_attention(query[:, :, 3:], plain_keys, plain_values, enable_gqa=True)
    torch.testing.assert_close(out[:, 3:], expected.transpose(1, 2), rtol=1e-5, atol=1e-6)


def test_the_python_function_gives_the_same_numbers_as_the_scripted_one():
    g = torch.Generator().manual_seed(1)
    args = []
    for _ in range(2):
        g.manual_seed(1)
        layers = [_layer(n, g) for n in (3, 0)]
        for layer in layers:
            layer.reserve(2)
        q = torch.randn(1, HEADS, 4, DIM, generator=g)
        k, v = (torch.randn(1, KV_HEADS, 4, DIM, generator=g) for _ in range(2))
        bufs = [layer.buffers for layer in layers]
        keys, values = [b[0] for b in bufs], [b[1] for b in bufs]
        args.append((q, k, v, keys, values, [0, 2], [2, 2], [1, 1], [3, 0], 0.5))
    torch.testing.assert_close(_attend()(*args[0]), attend_segments(*args[1]), rtol=0, atol=0)


def test_a_growable_layers_views_follow_its_length_and_transformers_reset():
    g = torch.Generator().manual_seed(2)
    layer = _layer(4, g)
    layer.reserve(100)
    assert layer.capacity >= 104 and layer.keys.shape[2] == 4  # room, not length
    layer.length += 1
    assert layer.keys.shape[2] == 5 and layer.values.shape[2] == 5
    layer.crop(-3)
    assert layer.keys.shape[2] == 2
    layer.reset()  # transformers 5.23 sets keys and values to None (earlier ones zero them)
    assert layer.get_seq_length() == 0 and (layer.keys is None or layer.keys.shape[2] == 0)


def test_a_forward_layer_makes_room_writes_and_moves_every_length():
    """What a packed forward does in one layer: RaggedCache.update starts an empty cache's layer and
    makes room, ragged_attention writes and attends, and each layer's length covers its new tokens."""
    g = torch.Generator().manual_seed(3)
    old, fresh = DynamicCacheOf(_layer(5, g)), DynamicCacheOf(GrowableLayer())
    plan = RaggedPlan((Segment(0, 1, old), Segment(1, 4, fresh)))
    query = torch.randn(1, HEADS, 4, DIM, generator=g)
    key, value = (torch.randn(1, KV_HEADS, 4, DIM, generator=g) for _ in range(2))
    returned = RaggedCache(plan).update(key, value, 0)
    assert returned[0] is key and fresh.layers[0].is_initialized and fresh.layers[0].capacity >= 3
    out, _ = ragged_attention(type("Attention", (), {"layer_idx": 0})(), query, *returned, None, ragged=plan)
    assert out.shape == (1, 4, HEADS, DIM)
    assert old.layers[0].get_seq_length() == 6 and fresh.layers[0].get_seq_length() == 3
    assert torch.equal(fresh.layers[0].keys, key[:, :, 1:4]) and torch.equal(
        old.layers[0].values[:, :, 5:], value[:, :, :1]
    )


class DynamicCacheOf:
    """A one-layer stand-in for a sequence's DynamicCache (only `.layers` is read)."""

    def __init__(self, layer: GrowableLayer) -> None:
        self.layers = [layer]


def _tiny_gemma(tokenizer, batching: str):
    """A tiny random Gemma 3 (window 8: a sliding layer, then a full one, twice) with SmolLM2's
    tokenizer, on the app's engine: its prompts cross the window many times."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from playground.engine.batcher import BatchConfig
    from playground.engine.local import LocalEngine

    torch.manual_seed(0)
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"] * 2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    model = Gemma3ForCausalLM(config).eval()
    return LocalEngine(
        model,
        tokenizer,
        torch.device("cpu"),
        torch.float32,
        "tiny-gemma",
        batching=BatchConfig(batching, 8, 24),
        prefill_chunk=16,
    )


def test_sliding_window_layers_batched_equal_alone_and_generate(embedded_lm):
    """Three streams in the running batch (prompts read in 16-token chunks past the 8-token window,
    a decode beside them) make the tokens each makes alone, and plain generate's."""
    import threading

    from playground.engine import DecodePlan
    from playground.engine.sampling import SamplingSettings

    batched = _tiny_gemma(embedded_lm.tokenizer, "continuous")
    alone = _tiny_gemma(embedded_lm.tokenizer, "off")
    assert batched.batcher is not None and "continuous" in batched.batching_line
    prompts = [list(range(10, 50)), list(range(100, 105)), list(range(200, 233))]
    plan = DecodePlan(SamplingSettings(temperature=0), 12, seed=0)

    def run(engine, ids):
        return [r.id for r in engine.stream(ids, plan) if hasattr(r, "id")]

    solo = [run(alone, p) for p in prompts]
    with torch.inference_mode():
        reference = [
            alone.model.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False, min_new_tokens=12)[
                0, len(p) :
            ]
            for p in prompts
        ]
    assert solo == [r.tolist() for r in reference]
    results: dict[int, list[int]] = {}
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, run(batched, prompts[i])))
        for i in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [results[i] for i in range(3)] == solo
    assert max(len(it.jobs) for it in batched.batcher.log) >= 2
