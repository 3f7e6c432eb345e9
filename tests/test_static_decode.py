"""The static decode path (engine/static.py, engine/slots.py) against the eager path.

The static path is the running batch's solo path: a lone job's one token runs on the slot (a CUDA
graph on a GPU), two or more jobs are batched. On CPU the slot runs the same steps a GPU records as
CUDA graphs, eagerly: these tests check that it gives the same tokens as the eager path (batching
off, dynamic cache) and probabilities within 1e-5 in float32, for chat, step (pick, undo, branch,
fork) and beam, on a tiny random model and on the real embedded model, that a lone stream takes the
slot and two streams are batched, and that the tokens made on the slot reach the sequence's own
cache. The graph-capture tests run only where CUDA exists.
"""

from __future__ import annotations

import math
import threading

import pytest
import torch
from conftest import make_tiny_llama

from playground.beam import beam_search
from playground.engine import DecodePlan, LocalEngine, SamplingSettings, TokenRecord
from playground.engine.batcher import BatchConfig
from playground.engine.slots import Slot, bucket_lengths, graph_row_counts
from playground.engine.static import DecodeStatus, StaticConfig, static_wanted, zero_gpu
from playground.errors import PlaygroundError
from playground.settings import load_settings
from playground.step import StepSession

TOLERANCE = 1e-5  # probabilities, float32
LOG_TOLERANCE = 1e-4  # log-probabilities: also tight where every probability is small
TINY = StaticConfig(capacity=64, min_bucket=16)
EMBEDDED = StaticConfig(capacity=512, min_bucket=16)
BATCHED = BatchConfig("continuous")
NO_CUDA = "no CUDA device here: the CUDA graph capture tests need a GPU"


def static_twin(engine: LocalEngine, config: StaticConfig) -> LocalEngine:
    """The same model and tokenizer behind a static-path engine (batching on: the path serves its lone
    requests), prepared."""
    twin = static_engine(engine, config)
    status = twin.prepare_decode()
    assert status.path == "static", status.note  # else the parity tests would compare eager with eager
    return twin


def static_engine(engine: LocalEngine, config: StaticConfig = TINY, **kwargs) -> LocalEngine:
    return LocalEngine(
        engine.model,
        engine.tokenizer,
        engine.device,
        engine.dtype,
        engine.name,
        decode="static",
        static_config=config,
        batching=BATCHED,
        **kwargs,
    )


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
    engine = static_engine(sliding)
    assert engine.decode_path == "eager"
    assert "static path unavailable: layers of type sliding_attention" in engine.describe_decode()


def test_with_batching_off_the_static_path_is_off_and_says_why(sharp_tiny: LocalEngine) -> None:
    engine = LocalEngine(
        sharp_tiny.model, sharp_tiny.tokenizer, sharp_tiny.device, sharp_tiny.dtype, "t", decode="static"
    )
    assert engine.decode_path == "eager" and engine.batcher is None
    assert "static path off: it serves a lone request of the running batch" in engine.describe_decode()


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
    status = DecodeStatus("static", "cuda", 6, (256, 8192), 4.25, 900 * 2**20, 600 * 2**20)
    assert status.line() == (
        "Decode: static KV cache + CUDA graphs (6 graphs, 256–8192 tokens) for a lone request · "
        "warm-up 4.2 s · GPU memory held 900 MiB, static cache and graphs 600 MiB"
    )
    eager = DecodeStatus("eager", "cuda", note="static path off (--no-compile)")
    assert eager.line() == "Decode: eager (dynamic KV cache) · static path off (--no-compile)"


def test_static_path_is_ready_on_cpu_without_graphs(tiny_pair: tuple[LocalEngine, LocalEngine]) -> None:
    eager, static = tiny_pair
    assert eager.decode_path == "eager"
    assert eager.describe_decode() == f"Decode: eager (dynamic KV cache) · {eager.batching_line}"
    assert static.decode_path == "static"
    line = static.describe_decode()
    assert line.startswith(
        "Decode: static KV cache, eager steps (16–64 tokens) for a lone request · warm-up "
    )
    assert line.endswith("a lone request on the static path)")


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
    assert static.batcher.log[-1].path == "packed"  # past the slot: the batched path goes on


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


def test_a_lone_stream_takes_the_slot_and_two_streams_are_batched(
    tiny_pair: tuple[LocalEngine, LocalEngine],
) -> None:
    """The switch: alone, every decode iteration is a slot step; two live streams share packed
    iterations; each stream's tokens equal its tokens alone."""
    eager, static = tiny_pair
    plans = [DecodePlan(SamplingSettings(temperature=0), 12, seed=0) for _ in range(2)]
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12, 13, 14]]
    alone = [tokens(eager.stream(p, plan)) for p, plan in zip(prompts, plans, strict=True)]
    before = static.batcher.iterations
    assert tokens(static.stream(prompts[0], plans[0])) == alone[0]
    lone = [it for it in static.batcher.log if it.index >= before]
    assert {it.path for it in lone if it.jobs[0].kind == "decode"} == {"static"}
    before, got = static.batcher.iterations, [[], []]
    started = threading.Barrier(2)

    def answer(i: int) -> None:
        started.wait()
        got[i] = tokens(static.stream(prompts[i], plans[i]))

    threads = [threading.Thread(target=answer, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == alone
    both = [it for it in static.batcher.log if it.index >= before and len(it.jobs) == 2]
    assert both and all(it.path == "packed" for it in both)


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


def test_a_pick_is_one_slot_step_and_its_token_reaches_the_sequences_own_cache(
    tiny_pair: tuple[LocalEngine, LocalEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    eager, static = tiny_pair
    ids = static.tokenizer("A short prompt for the step tab", add_special_tokens=False).input_ids
    static.sync("s", ids)
    eager.sync("s", ids)
    steps = count_calls(monkeypatch, Slot, "step")
    assert_same_rows(static.sync("s", [*ids, 42], last=2), eager.sync("s", [*ids, 42], last=2))
    assert len(steps) == 1  # a pick: one slot step (the row before it is remembered)
    cache = static.kv_store.peek("s").cache
    assert cache.get_seq_length() == len(ids) + 1  # copied back when the pick left the batch
    reference = eager.kv_store.peek("s").cache
    for mine, theirs in zip(cache.layers, reference.layers, strict=True):
        assert torch.allclose(mine.keys, theirs.keys, atol=1e-5) and torch.allclose(
            mine.values, theirs.values, atol=1e-5
        )
    static.sync("s", ids)  # undo: the remembered row, the cache cropped, no step
    assert len(steps) == 1
    for engine in (eager, static):
        engine.release("s")


def test_a_fork_after_slot_steps_continues_like_eager(tiny_pair: tuple[LocalEngine, LocalEngine]) -> None:
    eager, static = tiny_pair
    ids = eager.tokenizer("Two roads diverged in a wood", add_special_tokens=False).input_ids
    for engine in (eager, static):
        engine.sync("a", ids)
        engine.sync("a", [*ids, 5])  # a slot step on the static engine
        engine.fork("a", "b")
    for key, extra in (("a", [5, 6]), ("b", [5, 7]), ("a", [5, 6, 8])):
        assert_same_rows(static.sync(key, ids + extra), eager.sync(key, ids + extra))
    for engine in (eager, static):
        engine.release("a")
        engine.release("b")


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
def test_beam_search_rides_in_the_batch_and_matches_eager(
    tiny_pair: tuple[LocalEngine, LocalEngine], beams: int
) -> None:
    eager, static = tiny_pair
    got = beam_search(static, "The history of the printing press", beams, 12)
    assert_same_tree(got, beam_search(eager, "The history of the printing press", beams, 12))


# --- failures -----------------------------------------------------------------------------------------


def test_a_failed_capture_falls_back_to_eager_with_a_note(
    sharp_tiny: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self, *args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(Slot, "capture", broken)
    engine = static_engine(sharp_tiny)
    engine._static.graphs_wanted = True  # as on CUDA
    status = engine.prepare_decode()
    assert status.path == "eager" and engine.decode_path == "eager"
    assert (
        "static path off: capturing CUDA graphs failed (RuntimeError: operation not permitted"
        in status.line()
    )
    plan = DecodePlan(SamplingSettings(temperature=0), 5, seed=0)
    assert tokens(engine.stream([1, 2, 3], plan)) == tokens(sharp_tiny.stream([1, 2, 3], plan))
    assert {it.path for it in engine.batcher.log} == {"packed"}


def test_a_static_path_that_disagrees_with_eager_is_turned_off(
    sharp_tiny: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Slot.step

    def off_by_one(self, call, tokens, position, rows):
        return real(self, call, tokens, position + 1, rows)  # a wrong position: a wrong answer

    monkeypatch.setattr(Slot, "step", off_by_one)
    engine = static_engine(sharp_tiny)
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
    assert static.kv_store.peek("oom") is None  # its cache was freed
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
        model,
        tiny_lm.tokenizer,
        device,
        torch.float32,
        "tiny-cuda",
        decode="auto",
        static_config=TINY,
        batching=BATCHED,
    )
    graphs.prepare_decode()
    return eager, graphs


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_cuda_graphs_are_captured_at_load(cuda_pair: tuple[LocalEngine, LocalEngine]) -> None:
    _, graphs = cuda_pair
    status = graphs.decode_status
    assert status.path == "static", status.note
    assert status.graphs == 3  # one slot, one row, lengths 16, 32, 64
    assert status.warmup_seconds is not None and status.held_bytes and status.static_bytes
    assert "CUDA graphs (3 graphs, 16–64 tokens) for a lone request" in graphs.describe_decode()


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
