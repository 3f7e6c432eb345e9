"""The static decode path (engine/static.py, engine/slots.py) against the eager path.

On CPU the static path runs the same steps a GPU records as CUDA graphs, eagerly: these tests
check that it gives the same tokens as the eager (dynamic cache) path and probabilities within
1e-5 in float32, for chat, step (pick, undo, branch) and beam, on a tiny random model and on
the real embedded model. The graph-capture tests run only where CUDA exists.
"""

from __future__ import annotations

import math
import weakref

import pytest
import torch
from conftest import make_tiny_llama

from playground.beam import beam_search
from playground.engine import DecodePlan, LocalEngine, SamplingSettings, TokenRecord
from playground.engine.slots import KVShape, Slot, bucket_lengths, graph_row_counts
from playground.engine.static import (
    DecodeStatus,
    StaticConfig,
    StaticDecoder,
    StaticSequence,
    static_wanted,
    zero_gpu,
)
from playground.errors import PlaygroundError
from playground.settings import load_settings
from playground.step import StepSession

TOLERANCE = 1e-5  # probabilities, float32
LOG_TOLERANCE = 1e-4  # log-probabilities: also tight where every probability is small
TINY = StaticConfig(capacity=64, slots=2, beam_rows=4, beam_capacity=40, min_bucket=16)
EMBEDDED = StaticConfig(capacity=512, slots=2, beam_rows=4, beam_capacity=96, min_bucket=16)
NO_CUDA = "no CUDA device here: the CUDA graph capture tests need a GPU"


def static_twin(engine: LocalEngine, config: StaticConfig) -> LocalEngine:
    """The same model and tokenizer behind a static-path engine, prepared."""
    twin = LocalEngine(
        engine.model,
        engine.tokenizer,
        engine.device,
        engine.dtype,
        engine.name,
        decode="static",
        static_config=config,
    )
    status = twin.prepare_decode()
    assert status.path == "static", status.note  # else the parity tests would compare eager with eager
    return twin


@pytest.fixture(scope="module")
def sharp_tiny(tiny_lm: LocalEngine) -> LocalEngine:
    """A tiny random Llama with large weights: peaked distributions, so that a wrong cache shows
    (the default initialisation spreads every probability near 1 / vocab)."""
    return make_tiny_llama(tiny_lm.tokenizer, initializer_range=0.5)


@pytest.fixture(scope="module")
def tiny_pair(sharp_tiny: LocalEngine) -> tuple[LocalEngine, LocalEngine]:
    return sharp_tiny, static_twin(sharp_tiny, TINY)


@pytest.fixture(scope="module")
def embedded_pair(embedded_lm: LocalEngine) -> tuple[LocalEngine, LocalEngine]:
    return embedded_lm, static_twin(embedded_lm, EMBEDDED)


def tokens(records: list) -> list[int]:
    return [r.id for r in records if isinstance(r, TokenRecord)]


def assert_same_records(got: list, want: list) -> None:
    """Same ids; chosen, sampled and top-alternative probabilities within TOLERANCE."""
    got = [r for r in got if isinstance(r, TokenRecord)]
    want = [r for r in want if isinstance(r, TokenRecord)]
    assert [r.id for r in got] == [r.id for r in want]
    for a, b in zip(got, want, strict=True):
        assert abs(a.prob - b.prob) < TOLERANCE and abs(a.logprob - b.logprob) < LOG_TOLERANCE
        assert (a.sampled_prob is None) == (b.sampled_prob is None)
        assert a.sampled_prob is None or abs(a.sampled_prob - b.sampled_prob) < TOLERANCE
        assert [t.id for t in a.top] == [t.id for t in b.top]
        assert max(abs(x.prob - y.prob) for x, y in zip(a.top, b.top, strict=True)) < TOLERANCE
        assert max(abs(math.log(x.prob / y.prob)) for x, y in zip(a.top, b.top, strict=True)) < LOG_TOLERANCE


def assert_same_rows(got: torch.Tensor, want: torch.Tensor) -> None:
    """Full next-token distributions within TOLERANCE."""
    assert got.shape == want.shape
    assert float((got.softmax(-1) - want.softmax(-1)).abs().max()) < TOLERANCE
    assert float((got.log_softmax(-1) - want.log_softmax(-1)).abs().max()) < LOG_TOLERANCE


def count_calls(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> list[tuple]:
    """Record the arguments of every call to cls.name (still calling it)."""
    calls: list[tuple] = []
    real = getattr(cls, name)

    def spy(self, *args, **kwargs):
        calls.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, spy)
    return calls


# --- pieces -----------------------------------------------------------------------------------


def test_buckets_double_up_to_the_capacity() -> None:
    assert bucket_lengths(8192, 256) == (256, 512, 1024, 2048, 4096, 8192)
    assert bucket_lengths(1000, 256) == (256, 512, 1000)
    assert bucket_lengths(100, 256) == (100,)
    assert graph_row_counts(16) == (1, 2, 4, 8, 16)
    assert graph_row_counts(6) == (1, 2, 4, 6)
    assert graph_row_counts(1) == (1,)


def test_decode_option_is_checked_and_auto_means_static_on_cuda_only(tiny_lm: LocalEngine) -> None:
    model = tiny_lm.model
    assert static_wanted("auto", torch.device("cuda"), model) == (True, "")
    assert static_wanted("auto", torch.device("cpu"), model) == (False, "")
    assert static_wanted("static", torch.device("cpu"), model) == (True, "")
    assert static_wanted("eager", torch.device("cuda"), model) == (False, "static path off (--no-compile)")
    with pytest.raises(PlaygroundError, match="Unknown decode path 'fast'"):
        static_wanted("fast", torch.device("cpu"), model)
    with pytest.raises(PlaygroundError, match="capacity must be >= 1"):
        StaticConfig(capacity=0)


def test_compile_setting_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().compile is True
    monkeypatch.setenv("PLAYGROUND_COMPILE", "0")
    monkeypatch.setenv("PLAYGROUND_STATIC_TOKENS", "2048")
    monkeypatch.setenv("PLAYGROUND_DECODE", "static")
    settings = load_settings()
    assert settings.compile is False and settings.static_tokens == 2048 and settings.decode == "static"


def test_a_sliding_window_model_stays_eager_and_says_why(tiny_lm: LocalEngine) -> None:
    sliding = make_tiny_llama(
        tiny_lm.tokenizer, layer_types=["sliding_attention", "full_attention"], sliding_window=8
    )
    engine = LocalEngine(
        sliding.model, sliding.tokenizer, sliding.device, sliding.dtype, "sliding", decode="static"
    )
    assert engine.decode_path == "eager"
    assert "static path unavailable: layers of type sliding_attention" in engine.describe_decode()


def test_zero_gpu_needs_the_flag_and_the_spaces_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import playground.engine.static as static

    monkeypatch.setattr(
        static.importlib.util, "find_spec", lambda name: object() if name == "spaces" else None
    )
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert not zero_gpu()
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert zero_gpu()


def test_status_line_names_path_warm_up_and_memory() -> None:
    status = DecodeStatus("static", "cuda", 27, (256, 8192), 4.25, 900 * 2**20, 600 * 2**20)
    assert status.line() == (
        "Decode: static KV cache + CUDA graphs (27 graphs, 256–8192 tokens) · warm-up 4.2 s · "
        "GPU memory held 900 MiB, static caches and graphs 600 MiB"
    )
    eager = DecodeStatus("eager", "cuda", note="static path off (--no-compile)")
    assert eager.line() == "Decode: eager (dynamic KV cache) · static path off (--no-compile)"


def test_static_path_is_ready_on_cpu_without_graphs(tiny_pair: tuple[LocalEngine, LocalEngine]) -> None:
    eager, static = tiny_pair
    assert eager.decode_path == "eager"
    assert eager.describe_decode() == f"Decode: eager (dynamic KV cache) · {eager.batching_line}"
    assert static.decode_path == "static"
    line = static.describe_decode()
    assert line.startswith("Decode: static KV cache, eager steps (16–64 tokens) · warm-up ")


# --- chat -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        SamplingSettings(temperature=0),
        SamplingSettings(temperature=0.9, top_k=50, top_p=0.95, repetition_penalty=1.2),
    ],
    ids=["greedy", "sampled"],
)
def test_chat_decode_matches_eager_across_buckets_and_past_the_capacity(
    tiny_pair: tuple[LocalEngine, LocalEngine], settings: SamplingSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    eager, static = tiny_pair
    prompt = eager.tokenizer("The lighthouse keeper looked at the sea.", add_special_tokens=False).input_ids
    plan = DecodePlan(settings, 70 - len(prompt), seed=7)  # crosses the 16, 32 and 64-token lengths
    steps = count_calls(monkeypatch, Slot, "step")
    got = list(static.stream(prompt, plan))
    assert_same_records(got, list(eager.stream(prompt, plan)))
    assert len(tokens(got)) == plan.max_new_tokens
    positions = [call[2] for call in steps]
    assert positions == list(range(len(prompt), 64))  # one slot step per token until the slot is full


def test_chat_answer_prefix_and_a_kept_conversation_match_eager(
    tiny_pair: tuple[LocalEngine, LocalEngine],
) -> None:
    eager, static = tiny_pair
    prompt = eager.tokenizer("Once upon a time", add_special_tokens=False).input_ids
    plan = DecodePlan(SamplingSettings(temperature=0), 6, seed=0)
    for engine in (eager, static):
        engine.release("chat")
    first = [list(e.stream(prompt, plan, answer_prefix=[11, 12], key="chat")) for e in (eager, static)]
    assert_same_records(first[1], first[0])
    longer = [*prompt, 11, 12, *tokens(first[0])[2:], 13]
    second = [list(e.stream(longer, plan, key="chat")) for e in (eager, static)]
    assert_same_records(second[1], second[0])


# --- step by step -------------------------------------------------------------------------------


def step_trace(engine: LocalEngine, prompt: str) -> tuple[list[torch.Tensor], list[list[int]]]:
    """Pick, pick, undo, a different pick (a branch), greedy steps, back to the first branch,
    forced text: the next-token scores after each, and the token ids of every branch."""
    session = StepSession(engine, prompt)
    rows = [session.next_logits()]
    first = session.candidates(3)
    session.pick(first[0].token_id)
    session.pick(session.candidates(2)[1].token_id)
    rows.append(session.next_logits())
    session.undo(2)
    rows.append(session.next_logits())
    session.pick(first[2].token_id)
    session.greedy(4)
    rows.append(session.next_logits())
    session.switch_to(session.branches()[0].node_id)
    rows.append(session.next_logits())
    session.force(" and then the storm came")
    rows.append(session.next_logits())
    branches = [session.tree.token_ids(b.node_id) for b in session.branches()]
    session.release()
    return rows, branches


def test_step_pick_undo_branch_match_eager(tiny_pair: tuple[LocalEngine, LocalEngine]) -> None:
    eager, static = tiny_pair
    want_rows, want_branches = step_trace(eager, "The printing press")
    got_rows, got_branches = step_trace(static, "The printing press")
    assert got_branches == want_branches
    for got, want in zip(got_rows, want_rows, strict=True):
        assert_same_rows(got, want)


def test_a_pick_is_one_slot_step_and_undo_copies_nothing(
    tiny_pair: tuple[LocalEngine, LocalEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, static = tiny_pair
    ids = static.tokenizer("A short prompt for the step tab", add_special_tokens=False).input_ids
    static.sync("s", ids)
    sequence = static.kv_store.peek("s").cache
    assert isinstance(sequence, StaticSequence) and sequence.resident
    slot, address = sequence.slot, sequence.slot.keys.data_ptr()
    steps, chunks = count_calls(monkeypatch, Slot, "step"), count_calls(monkeypatch, Slot, "chunk")
    static.sync("s", [*ids, 42], last=2)  # a pick: the row before it is remembered
    assert len(steps) == 1 and not chunks
    static.sync("s", ids)  # undo: the remembered row, the cache cropped in place
    assert len(steps) == 1 and not chunks
    assert sequence.length == len(ids) and sequence.slot is slot and slot.keys.data_ptr() == address
    static.release("s")


def test_a_fork_copies_the_prefix_rows_and_both_continue_like_eager(
    tiny_pair: tuple[LocalEngine, LocalEngine],
) -> None:
    eager, static = tiny_pair
    ids = eager.tokenizer("Two roads diverged in a wood", add_special_tokens=False).input_ids
    for engine in (eager, static):
        engine.sync("a", ids)
        engine.fork("a", "b")
    source, twin = static.kv_store.peek("a").cache, static.kv_store.peek("b").cache
    assert twin.parked is not None and twin.parked[0].data_ptr() != source.slot.keys.data_ptr()
    assert torch.equal(twin.parked[0], source.slot.rows_of(0, 1, len(ids))[0])
    for key, extra in (("a", [5, 6]), ("b", [7]), ("a", [5, 6, 8])):
        assert_same_rows(static.sync(key, ids + extra), eager.sync(key, ids + extra))
    for engine in (eager, static):
        engine.release("a")
        engine.release("b")


def test_more_sequences_than_slots_are_parked_and_restored(
    tiny_pair: tuple[LocalEngine, LocalEngine],
) -> None:
    eager, static = tiny_pair
    keys = ["p", "q", "r"]  # three sequences, two slots
    prompts = {
        k: eager.tokenizer(f"Sequence {k} begins here", add_special_tokens=False).input_ids for k in keys
    }
    for round_ in range(3):
        for key in keys:
            prompts[key] = [*prompts[key], 20 + round_]
            assert_same_rows(static.sync(key, prompts[key]), eager.sync(key, prompts[key]))
    parked = [static.kv_store.peek(k).cache for k in keys]
    assert sum(not seq.resident for seq in parked) == 1
    assert all(seq.storage_bytes() > 0 for seq in parked if not seq.resident)
    assert all(seq.storage_bytes() == 0 for seq in parked if seq.resident)
    for key in keys:
        eager.release(key)
        static.release(key)


def test_parked_copies_count_in_the_kv_store_and_are_evicted_over_its_bound(
    sharp_tiny: LocalEngine,
) -> None:
    """Five sequences, two slots: every parked copy is in the store's total, which stays under the
    bound by evicting (each parked copy is freed with its sequence)."""
    engine = LocalEngine(
        sharp_tiny.model,
        sharp_tiny.tokenizer,
        sharp_tiny.device,
        sharp_tiny.dtype,
        "t",
        decode="static",
        static_config=TINY,
        kv_store_bytes=1,  # set below, from the sizes
    )
    assert engine.prepare_decode().path == "static"
    store, prompt = engine.kv_store, list(range(3, 43))
    row_bytes = engine.vocab_size * 4  # each entry remembers one float32 next-token row
    copy_bytes = KVShape.of(engine.model, engine.device).bytes_per_token() * (len(prompt) + 1)
    store.max_bytes = 5 * row_bytes + 2 * copy_bytes  # room for five rows and two parked copies
    sequences = {}  # weak references: an evicted sequence must be freed, parked copy and slot
    for n in range(5):
        engine.sync(f"s{n}", [n + 3, *prompt])
        sequences[f"s{n}"] = weakref.ref(engine.kv_store.peek(f"s{n}").cache)
    kept = set(store.keys())
    parked = [k for k in kept if not sequences[k]().resident]
    assert len(parked) == 2 and all(sequences[k]().storage_bytes() == copy_bytes for k in parked)
    assert store.total_bytes == sum(store.peek(k).nbytes() for k in kept) == 4 * row_bytes + 2 * copy_bytes
    assert store.evictions == 1 and kept == {"s1", "s2", "s3", "s4"}
    assert sequences["s0"]() is None  # s0 was parked first, so evicted first: its copy is gone
    for key in kept:
        engine.release(key)


def test_a_one_off_prefill_or_score_does_not_park_a_live_sequence(
    tiny_pair: tuple[LocalEngine, LocalEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    eager, static = tiny_pair
    ids = eager.tokenizer("A live chat and a live step session", add_special_tokens=False).input_ids
    for key in ("chat", "step"):  # both slots taken by live sequences
        static.sync(key, ids)
    live = [static.kv_store.peek(key).cache for key in ("chat", "step")]
    assert all(seq.resident for seq in live)
    parks = count_calls(monkeypatch, StaticDecoder, "_resident")
    assert_same_rows(static.prefill([*ids, 7], last=3), eager.prefill([*ids, 7], last=3))
    assert_same_rows(static.score([*ids, 7, 9], 2), eager.score([*ids, 7, 9], 2))
    assert not parks and all(seq.resident and seq.parked is None for seq in live)
    for key in ("chat", "step"):
        static.release(key)


def test_default_slots_are_one_more_than_the_model_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().slot_count() == 3 == StaticConfig().slots
    monkeypatch.setenv("PLAYGROUND_MODEL_CONCURRENCY", "4")
    assert load_settings().slot_count() == 5
    monkeypatch.setenv("PLAYGROUND_STATIC_SLOTS", "2")
    assert load_settings().slot_count() == 2


def test_a_released_sequence_frees_its_slot(tiny_pair: tuple[LocalEngine, LocalEngine]) -> None:
    _, static = tiny_pair
    static.sync("gone", [1, 2, 3])
    slot = static.kv_store.peek("gone").cache.slot
    assert slot.holder() is not None
    static.release("gone")
    assert slot.holder() is None


# --- beams ------------------------------------------------------------------------------------------


def assert_same_tree(got, want) -> None:
    assert got.sequences == want.sequences
    assert [n.token.id for n in got.nodes[1:]] == [n.token.id for n in want.nodes[1:]]
    for a, b in zip(got.nodes[1:], want.nodes[1:], strict=True):
        assert abs(math.exp(a.logprob) - math.exp(b.logprob)) < TOLERANCE
        assert (
            abs(a.logprob - b.logprob) < LOG_TOLERANCE
            and abs(a.token.logprob - b.token.logprob) < LOG_TOLERANCE
        )
        assert a.fate == b.fate


@pytest.mark.parametrize("beams", [3, 4])
def test_beam_search_matches_eager_with_rows_reordered_in_place(
    tiny_pair: tuple[LocalEngine, LocalEngine], beams: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    eager, static = tiny_pair
    steps = count_calls(monkeypatch, Slot, "step")
    got = beam_search(static, "The history of the printing press", beams, 12)
    assert len(steps) == 11 and all(call[3] == beams for call in steps)  # padded to 4 rows inside
    assert_same_tree(got, beam_search(eager, "The history of the printing press", beams, 12))
    assert static._static.beam_slot.holder() is None  # the search is over: the slot is free


def test_a_beam_search_longer_than_the_beam_slot_continues_eagerly(
    tiny_pair: tuple[LocalEngine, LocalEngine],
) -> None:
    eager, static = tiny_pair
    prompt = "A prompt of some length that nearly fills the beam slot of forty tokens"
    got = beam_search(static, prompt, 2, 30)  # prompt + 30 > 40: the batch moves to a DynamicCache
    assert_same_tree(got, beam_search(eager, prompt, 2, 30))


def test_a_second_concurrent_search_uses_the_eager_path(tiny_pair: tuple[LocalEngine, LocalEngine]) -> None:
    _, static = tiny_pair
    first, _ = static.beam_start([1, 2, 3], 2)
    second, _ = static.beam_start([1, 2, 3], 2)
    assert type(first.cache).__name__ == "StaticBeams" and type(second.cache).__name__ == "DynamicCache"
    del first, second


# --- failures -----------------------------------------------------------------------------------------


def test_a_failed_capture_falls_back_to_eager_with_a_note(
    sharp_tiny: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny_lm = sharp_tiny

    def broken(self, *args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(Slot, "capture", broken)
    engine = LocalEngine(
        tiny_lm.model, tiny_lm.tokenizer, tiny_lm.device, tiny_lm.dtype, "t", decode="static"
    )
    engine._static.graphs_wanted = True  # as on CUDA
    status = engine.prepare_decode()
    assert status.path == "eager" and engine.decode_path == "eager"
    assert (
        "static path off: capturing CUDA graphs failed (RuntimeError: operation not permitted"
        in status.line()
    )
    plan = DecodePlan(SamplingSettings(temperature=0), 5, seed=0)
    assert tokens(engine.stream([1, 2, 3], plan)) == tokens(tiny_lm.stream([1, 2, 3], plan))
    assert type(engine.beam_start([1, 2], 2)[0].cache).__name__ == "DynamicCache"


def test_a_static_path_that_disagrees_with_eager_is_turned_off(
    sharp_tiny: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny_lm = sharp_tiny
    real = Slot.step

    def off_by_one(self, call, tokens, position, rows):
        return real(self, call, tokens, position + 1, rows)  # a wrong position: a wrong answer

    monkeypatch.setattr(Slot, "step", off_by_one)
    engine = LocalEngine(
        tiny_lm.model, tiny_lm.tokenizer, tiny_lm.device, tiny_lm.dtype, "t", decode="static"
    )
    assert engine.prepare_decode().path == "eager"
    assert "checking the static path against eager failed (RuntimeError: the static path disagrees" in (
        engine.describe_decode()
    )


def test_out_of_memory_frees_that_request_and_the_engine_keeps_serving(
    tiny_pair: tuple[LocalEngine, LocalEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    eager, static = tiny_pair
    real, failed = Slot.step, []

    def fails_once(self, *args, **kwargs):
        if not failed:
            failed.append(self)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Slot, "step", fails_once)
    plan = DecodePlan(SamplingSettings(temperature=0), 4, seed=0)
    with pytest.raises(PlaygroundError, match="Out of memory on cpu: this request's cache was freed"):
        list(static.stream([1, 2, 3, 4], plan, key="oom"))
    assert failed[0].holder() is None and static.kv_store.peek("oom") is None  # its cache was freed
    assert tokens(static.stream([1, 2, 3, 4], plan, key="oom")) == tokens(eager.stream([1, 2, 3, 4], plan))
    static.release("oom")


# --- the real embedded model ----------------------------------------------------------------------


def test_embedded_chat_matches_eager(embedded_pair: tuple[LocalEngine, LocalEngine]) -> None:
    from playground.engine.prompts import encode_conversation

    eager, static = embedded_pair
    prompt = encode_conversation(
        eager.tokenizer, [{"role": "user", "content": "What is the capital of France?"}]
    )
    for settings in (SamplingSettings(temperature=0), SamplingSettings(temperature=0.7, top_p=0.9)):
        plan = DecodePlan(settings, 8, seed=3)
        assert_same_records(list(static.stream(prompt, plan)), list(eager.stream(prompt, plan)))


def test_embedded_step_matches_eager(embedded_pair: tuple[LocalEngine, LocalEngine]) -> None:
    eager, static = embedded_pair
    want_rows, want_branches = step_trace(eager, "The capital of France is")
    got_rows, got_branches = step_trace(static, "The capital of France is")
    assert got_branches == want_branches
    for got, want in zip(got_rows, want_rows, strict=True):
        assert_same_rows(got, want)


def test_embedded_beam_matches_eager(embedded_pair: tuple[LocalEngine, LocalEngine]) -> None:
    eager, static = embedded_pair
    prompt = "The capital of France is"
    assert_same_tree(beam_search(static, prompt, 4, 6), beam_search(eager, prompt, 4, 6))


# --- CUDA graphs (only where CUDA exists) ------------------------------------------------------------


@pytest.fixture(scope="module")
def cuda_pair(tiny_lm: LocalEngine) -> tuple[LocalEngine, LocalEngine]:
    """A tiny model in float32 on CUDA, eager and with captured graphs."""
    model = make_tiny_llama(tiny_lm.tokenizer, initializer_range=0.5).model.to("cuda")
    device = torch.device("cuda")
    eager = LocalEngine(model, tiny_lm.tokenizer, device, torch.float32, "tiny-cuda")
    graphs = LocalEngine(
        model, tiny_lm.tokenizer, device, torch.float32, "tiny-cuda", decode="auto", static_config=TINY
    )
    graphs.prepare_decode()
    return eager, graphs


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_cuda_graphs_are_captured_at_load(cuda_pair: tuple[LocalEngine, LocalEngine]) -> None:
    _, graphs = cuda_pair
    status = graphs.decode_status
    assert status.path == "static", status.note
    # 2 slots x 3 lengths, and the beam slot: rows 1, 2, 4 x lengths 16, 32, 40
    assert status.graphs == 2 * 3 + 3 * 3
    assert status.warmup_seconds is not None and status.held_bytes and status.static_bytes
    assert "CUDA graphs (15 graphs, 16–64 tokens)" in graphs.describe_decode()


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_cuda_graph_replays_match_eager(cuda_pair: tuple[LocalEngine, LocalEngine]) -> None:
    eager, graphs = cuda_pair
    prompt = eager.tokenizer("The lighthouse keeper looked at the sea.", add_special_tokens=False).input_ids
    plan = DecodePlan(SamplingSettings(temperature=0), 60 - len(prompt), seed=0)
    assert_same_records(list(graphs.stream(prompt, plan)), list(eager.stream(prompt, plan)))
    want_rows, want_branches = step_trace(eager, "The printing press")
    got_rows, got_branches = step_trace(graphs, "The printing press")
    assert got_branches == want_branches
    for got, want in zip(got_rows, want_rows, strict=True):
        assert_same_rows(got, want)
    assert_same_tree(
        beam_search(graphs, "The printing press", 3, 10), beam_search(eager, "The printing press", 3, 10)
    )
