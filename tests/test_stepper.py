"""StepSession: chain rule, cache reuse, undo/branches, bad input, export, concurrency."""

from __future__ import annotations

import copy
import itertools
import json
import math
import threading

import pytest
import torch
from forward_counts import count_forwards as counted

from playground.engine import kv_store as kv_store_module
from playground.engine.kv_store import CacheEntry, KVStore
from playground.engine.prompts import encode_prompt
from playground.engine.tokens import decode_ids, stream_pieces
from playground.errors import PlaygroundError
from playground.sessions import SessionStore
from playground.step import (
    StepSession,
    session_from_dict,
    session_from_json,
    session_to_dict,
    session_to_json,
)
from tests.conftest import make_tiny_llama

PROMPT = "The capital of France is"


def full_forward_logprobs(lm, session: StepSession) -> torch.Tensor:
    """log P(token_i | everything before) for the session's generated tokens, from ONE forward
    over prompt + tokens, without any cache: (n_generated,)."""
    ids = torch.tensor([session.ids])
    with torch.inference_mode():
        logprobs = torch.log_softmax(lm.model(ids).logits[0].float(), dim=-1)  # (seq, vocab)
    start = len(session.prompt_ids)
    targets = torch.tensor(session.token_ids)
    return logprobs[start - 1 : -1].gather(1, targets[:, None])[:, 0]


def snapshot(session: StepSession) -> tuple:
    ledger = [(e.logprob, e.cum_logprob) for e in session.ledger]
    return (list(session.ids), list(session.path), len(session.nodes), ledger)


def count_forwards(monkeypatch, session: StepSession) -> list[int]:
    """Record the number of new tokens of every forward the session's engine runs."""
    return counted(monkeypatch, session.engine)


def cache_entry(session: StepSession) -> CacheEntry:
    """What the engine keeps for the session's sequence."""
    return session.engine.kv_store.peek(session.key)


def with_store(lm, max_bytes: int):
    """The same model and lock behind its own KV store (to watch eviction)."""
    twin = copy.copy(lm)
    twin.kv_store = KVStore(max_bytes)
    return twin


@pytest.fixture(scope="module")
def small_context_lm(embedded_lm):
    lm = make_tiny_llama(embedded_lm.tokenizer, seed=3)
    lm.model.config.max_position_embeddings = 12  # a context limit reached in a few steps
    return lm


# --- the chain rule -----------------------------------------------------------------------


def test_ledger_is_the_chain_rule_of_one_full_forward(embedded_lm) -> None:
    session = StepSession(embedded_lm, PROMPT)
    session.pick(session.candidates(3)[2].token_id)  # a less likely token
    session.pick(session.candidates(1)[0].token_id)
    session.force(" and the river, which")
    session.sample({"temperature": 0.9, "top_k": 40}, seed=11)
    session.greedy(2)
    session.undo()
    session.pick(session.candidates(5)[4].token_id)
    reference = full_forward_logprobs(embedded_lm, session)
    ledger = session.ledger
    assert len(ledger) == len(reference) == len(session.token_ids) >= 10
    torch.testing.assert_close([e.logprob for e in ledger], reference.double().tolist(), atol=1e-3, rtol=0)
    assert sum(e.logprob for e in ledger) == pytest.approx(float(reference.sum()), abs=1e-3)
    assert ledger[-1].cum_logprob == pytest.approx(sum(e.logprob for e in ledger), abs=1e-9)
    for entry in ledger:
        assert entry.prob == pytest.approx(math.exp(entry.logprob))
        assert entry.perplexity == pytest.approx(math.exp(-entry.cum_logprob / entry.step))
        assert entry.token.rank >= 1 and entry.token.entropy >= 0
    assert [e.token.source for e in ledger][:3] == ["pick", "pick", "force"]
    assert ledger[0].token.rank == 3 and ledger[-1].token.rank == 5


def test_ranks_and_entropy_match_the_full_distribution(embedded_lm) -> None:
    session = StepSession(embedded_lm, PROMPT)
    far = session.candidates(2000)[-1]  # rank ~2000: far outside any top-k shown
    entry = session.pick(far.token_id)
    ids = torch.tensor([session.prompt_ids])
    with torch.inference_mode():
        logits = embedded_lm.model(ids).logits[0, -1].float()
    logprobs = torch.log_softmax(logits, -1)
    assert entry.token.rank == 1 + int((logits > logits[far.token_id]).sum()) == far.rank
    assert entry.token.entropy == pytest.approx(float(-(logprobs.exp() * logprobs).sum()), abs=1e-4)


# --- candidates, cache reuse -----------------------------------------------------------------


def test_candidates_need_no_forward_and_a_pick_forwards_one_token(embedded_lm, monkeypatch) -> None:
    session = StepSession(embedded_lm, PROMPT)
    session.next_logits()  # the prompt's forward
    calls = count_forwards(monkeypatch, session)
    first = session.candidates(10, {"temperature": 0.7, "top_p": 0.9})
    session.candidates(10)
    session.probability_of(first[5].token_id)
    assert calls == []
    session.pick(first[0].token_id)
    assert calls == [1]
    entry = cache_entry(session)
    assert entry.ids == session.ids and entry.cache.get_seq_length() == len(session.ids)


def test_candidates_fields(embedded_lm) -> None:
    session = StepSession(embedded_lm, PROMPT)
    cands = session.candidates(10, {"top_k": 3})
    assert [c.rank for c in cands] == list(range(1, 11))
    assert all(a.prob >= b.prob for a, b in itertools.pairwise(cands))
    assert cands[0].piece.text == " Paris" and cands[0].piece.visible == "␣Paris"
    assert [c.kept for c in cands] == [True] * 3 + [False] * 7
    assert sum(c.sampled_prob for c in cands[:3]) == pytest.approx(1.0, abs=1e-5)
    assert cands[0].sampled_prob == pytest.approx(cands[0].prob / sum(c.prob for c in cands[:3]), rel=1e-4)
    assert all(c.logprob == pytest.approx(math.log(c.prob), abs=1e-5) for c in cands)


def test_undo_then_the_same_pick_gives_the_same_candidates(embedded_lm, monkeypatch) -> None:
    session = StepSession(embedded_lm, PROMPT)
    session.greedy(3)
    before = session.candidates(10)
    session.pick(before[1].token_id)
    after_pick = session.candidates(10)
    calls = count_forwards(monkeypatch, session)
    session.undo()
    again = session.candidates(10)
    assert calls == []  # undo crops the cache and reuses the remembered logits
    assert cache_entry(session).cache.get_seq_length() == len(session.ids)
    assert [c.token_id for c in again] == [c.token_id for c in before]
    torch.testing.assert_close([c.prob for c in again], [c.prob for c in before], atol=1e-6, rtol=0)
    session.pick(before[1].token_id)
    assert calls == [1]
    assert [c.token_id for c in session.candidates(10)] == [c.token_id for c in after_pick]
    torch.testing.assert_close(
        [c.prob for c in session.candidates(10)], [c.prob for c in after_pick], atol=1e-6, rtol=0
    )


def test_a_token_chosen_again_after_undo_says_how_it_was_chosen_this_time(tiny_lm) -> None:
    session = StepSession(tiny_lm, PROMPT)
    session.greedy(2)
    greedy_token, node = session.token_ids[-1], session.tip
    session.undo()
    entry = session.pick(greedy_token)
    assert session.tip == node  # the same node of the tree
    assert entry.token.source == "pick" and session.ledger[-1].token.source == "pick"
    session.undo()
    sampled = session.sample(seed=0)
    assert sampled.token.source == "sample" and sampled.token.sampled_prob is not None


def test_undo_far_back_crops_and_recomputes_one_token(embedded_lm, monkeypatch) -> None:
    monkeypatch.setattr(kv_store_module, "REMEMBERED_LOGITS", 2)  # remember only a couple of positions
    session = StepSession(embedded_lm, PROMPT)
    session.greedy(6)
    reference = full_forward_logprobs(embedded_lm, session)
    calls = count_forwards(monkeypatch, session)
    session.undo(4)
    session.next_logits()
    assert calls == [1]  # crop to the new tip minus one, forward that one token
    assert cache_entry(session).cache.get_seq_length() == len(session.ids)
    entry = session.pick(session.candidates(1)[0].token_id)  # the same greedy token again
    assert entry.logprob == pytest.approx(float(reference[2]), abs=1e-3)


def test_branches_keep_old_continuations(embedded_lm, monkeypatch) -> None:
    session = StepSession(embedded_lm, PROMPT)
    session.greedy(4)
    old_text, old_tip, old_cands = session.text, session.tip, session.candidates(5)
    session.undo(3)
    session.pick(session.candidates(5)[3].token_id)
    session.greedy(2)
    branches = session.branches()
    assert len(branches) == 2
    assert [b.current for b in branches] == [False, True]
    assert branches[0].text == old_text and branches[0].node_id == old_tip and branches[0].length == 4
    calls = count_forwards(monkeypatch, session)
    session.switch_to(old_tip)
    assert session.text == old_text
    assert sum(calls) <= 3  # only the tokens after the common prefix, never the prompt
    assert [c.token_id for c in session.candidates(5)] == [c.token_id for c in old_cands]
    torch.testing.assert_close(
        [c.prob for c in session.candidates(5)], [c.prob for c in old_cands], atol=1e-5, rtol=0
    )
    assert [b.current for b in session.branches()] == [True, False]
    session.undo(3)
    assert all(b.current for b in session.branches())  # both continue the current tip
    session.pick(session.nodes[session.nodes[session.tip].children[0]].token_id)
    assert len(session.nodes) == 8  # picking an existing token reuses its node


def test_force_appends_several_tokens_in_one_forward(embedded_lm, monkeypatch) -> None:
    session = StepSession(embedded_lm, PROMPT)
    session.next_logits()  # the prompt's forward
    calls = count_forwards(monkeypatch, session)
    entries = session.force(" Lyon.\nIt")
    assert calls == [len(entries)] and len(entries) >= 4
    assert session.text == " Lyon.\nIt"
    assert "↵" in [e.token.visible for e in entries]
    reference = full_forward_logprobs(embedded_lm, session)
    torch.testing.assert_close([e.logprob for e in entries], reference.double().tolist(), atol=1e-3, rtol=0)


def test_probability_of_any_token_or_text(embedded_lm) -> None:
    session = StepSession(embedded_lm, PROMPT)
    top = session.candidates(1, {"top_k": 5})[0]
    single = session.probability_of(top.token_id, {"top_k": 5})
    assert single.tokens[0].prob == pytest.approx(top.prob) and single.tokens[0].rank == 1
    assert single.tokens[0].sampled_prob == pytest.approx(top.sampled_prob)
    rare = session.probability_of(" xylophone")
    assert rare.tokens[0].rank > 1000 and rare.tokens[0].sampled_prob == pytest.approx(rare.tokens[0].prob)
    before = snapshot(session)
    text = session.probability_of(" Paris, the city")
    assert snapshot(session) == before  # looking does not change the session
    session.force(" Paris, the city")
    assert text.logprob == pytest.approx(sum(e.logprob for e in session.ledger), abs=1e-4)
    assert [t.rank for t in text.tokens] == [e.token.rank for e in session.ledger]


def test_chat_wraps_the_prompt_as_a_user_turn(embedded_lm) -> None:
    session = StepSession(embedded_lm, "What is the capital of France?", chat=True)
    text = embedded_lm.tokenizer.decode(session.prompt_ids)
    assert "<|im_start|>user\nWhat is the capital of France?<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    session.greedy(7)
    assert "Paris" in session.text


# --- parity with generate ---------------------------------------------------------------------


def test_seeded_sampling_and_greedy_match_generate(embedded_lm) -> None:
    settings = {"temperature": 0.8, "top_k": 50, "top_p": 0.95, "repetition_penalty": 1.1}
    session = StepSession(embedded_lm, "Once upon a time")
    session.sample_steps(6, settings, seed=1234)
    ids = torch.tensor([session.prompt_ids])
    torch.manual_seed(1234)
    with torch.inference_mode():
        out = embedded_lm.model.generate(ids, do_sample=True, max_new_tokens=6, **settings)
    assert session.token_ids == out[0, ids.shape[1] :].tolist()
    greedy = StepSession(embedded_lm, "Once upon a time")
    greedy.greedy(6)
    with torch.inference_mode():
        out = embedded_lm.model.generate(ids, do_sample=False, max_new_tokens=6)
    assert greedy.token_ids == out[0, ids.shape[1] :].tolist()
    assert all(e.token.sampled_prob is None for e in greedy.ledger)
    assert all(0 < e.token.sampled_prob <= 1 for e in session.ledger)


# --- bad input: clear message, session unchanged -------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (-1, "outside the vocabulary"),
        (49152, "outside the vocabulary"),
        (10**9, "outside the vocabulary"),
        (True, "not a whole number"),
        ("12", "not a whole number"),
        ("abc", "not a whole number"),
        (3.0, "not a whole number"),
        (None, "not a whole number"),
    ],
)
def test_bad_token_ids_are_refused(tiny_lm, bad, message) -> None:
    session = StepSession(tiny_lm, PROMPT)
    session.greedy(2)
    before = snapshot(session)
    with pytest.raises(PlaygroundError, match=message) as info:
        session.pick(bad)
    assert repr(bad) in str(info.value)
    assert snapshot(session) == before


def test_bad_requests_leave_the_session_unchanged(tiny_lm) -> None:
    session = StepSession(tiny_lm, PROMPT)
    session.greedy(2)
    before = snapshot(session)
    cases = [
        (lambda: session.force(""), "empty"),
        (lambda: session.candidates(10, {"temperature": -1}), "-1"),
        (lambda: session.sample({"top_p": 2.0}, seed=1), "2.0"),
        (lambda: session.sample_steps(0), "0"),
        (lambda: session.candidates(0), "0"),
        (lambda: session.undo(5), "5"),
        (lambda: session.switch_to(99), "99"),
        (lambda: session.probability_of(""), "Type"),
    ]
    for call, shown in cases:
        with pytest.raises(PlaygroundError) as info:
            call()
        assert shown in str(info.value)
        assert snapshot(session) == before


def test_context_limit_is_refused_without_change(small_context_lm) -> None:
    with pytest.raises(PlaygroundError, match="context limit of 12"):
        StepSession(
            small_context_lm, "one two three four five six seven eight nine ten eleven twelve thirteen"
        )
    session = StepSession(small_context_lm, "one two three")
    session.greedy(12 - len(session.prompt_ids) - 1)
    before = snapshot(session)
    for call in (lambda: session.greedy(2), lambda: session.force(" a b c"), lambda: session.sample_steps(5)):
        with pytest.raises(PlaygroundError, match="Context limit reached"):
            call()
        assert snapshot(session) == before
    session.pick(5)  # exactly at the limit is fine
    with pytest.raises(PlaygroundError, match="12"):
        session.pick(5)


def test_a_failed_forward_changes_nothing(tiny_lm, monkeypatch) -> None:
    session = StepSession(tiny_lm, PROMPT)
    session.greedy(2)
    before = snapshot(session)

    def broken(*args, **kwargs):
        raise torch.OutOfMemoryError("simulated")

    monkeypatch.setattr(session.engine, "_piece", broken)
    with pytest.raises(PlaygroundError, match="Out of memory"):
        session.force(" hello there")
    assert snapshot(session) == before
    assert all(not child for child in [n.children for n in session.nodes[-1:]])


# --- store: eviction, isolation, concurrency -------------------------------------------------


def test_evicted_sessions_rebuild_transparently(tiny_lm) -> None:
    evicting = with_store(tiny_lm, 1)  # every put evicts every other session
    roomy = with_store(tiny_lm, 256 * 2**20)
    a, b = StepSession(evicting, "Alpha beta"), StepSession(evicting, "Gamma")
    ref_a, ref_b = StepSession(roomy, "Alpha beta"), StepSession(roomy, "Gamma")
    for session in (a, b, ref_a, ref_b):
        session.pick(100)
        session.force(" x y")
    a.undo()
    ref_a.undo()
    for session, ref in ((a, ref_a), (b, ref_b)):
        session.greedy(2)
        ref.greedy(2)
        assert session.token_ids == ref.token_ids
        torch.testing.assert_close(
            [e.logprob for e in session.ledger], [e.logprob for e in ref.ledger], atol=1e-4, rtol=0
        )
    assert evicting.kv_store.evictions > 0 and len(evicting.kv_store.keys()) == 1


def test_kv_store_bounds_bytes_lru() -> None:
    store = KVStore(3000)
    entries = {}
    for key in "abc":
        entries[key] = CacheEntry()
        entries[key].remember(1, torch.zeros(250))  # 1000 bytes each
        store.put(key, entries[key])
    assert store.keys() == ["a", "b", "c"] and store.total_bytes == 3000
    store.peek("a")  # a is now the most recently used
    entries["d"] = CacheEntry()
    entries["d"].remember(1, torch.zeros(250))
    store.put("d", entries["d"])
    assert store.keys() == ["c", "a", "d"] and store.evictions == 1
    with pytest.raises(PlaygroundError, match="0"):
        KVStore(0)


def test_session_store_ids(tiny_lm) -> None:
    sessions = SessionStore(max_sessions=2, hint="press Start first")
    first = sessions.add(StepSession(tiny_lm, "a"))
    second = sessions.add(StepSession(tiny_lm, "b"))
    assert first != second and sessions.get(first).prompt == "a"
    sessions.add(StepSession(tiny_lm, "c"))
    assert len(sessions) == 2
    with pytest.raises(PlaygroundError, match="Start"):
        sessions.get(second)  # the least recently used one was dropped
    with pytest.raises(PlaygroundError, match="Start"):
        sessions.get(None)


def test_concurrent_clicks_never_mix_sessions(tiny_lm) -> None:
    shared = with_store(tiny_lm, 64 * 1024)  # small: sessions evict each other while threads run
    scripts = {
        "The cat": [("pick", 300), ("force", " sat on"), ("sample", 5), ("undo", 1), ("greedy", 3)],
        "A dog and": [("greedy", 2), ("pick", 1200), ("undo", 2), ("force", " ran"), ("sample", 9)],
    }

    def play(session: StepSession, script) -> None:
        for _ in range(3):
            for action, arg in script:
                if action == "sample":
                    session.sample({"temperature": 0.9}, seed=arg)
                else:
                    getattr(session, action)(arg)

    expected = {}
    for prompt, script in scripts.items():
        alone = StepSession(with_store(tiny_lm, 256 * 2**20), prompt)
        play(alone, script)
        expected[prompt] = (alone.token_ids, [e.logprob for e in alone.ledger])
    sessions = [StepSession(shared, p) for p in scripts for _ in range(2)]
    threads = [threading.Thread(target=play, args=(s, scripts[s.prompt])) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for session in sessions:
        ids, logprobs = expected[session.prompt]
        assert session.token_ids == ids
        torch.testing.assert_close([e.logprob for e in session.ledger], logprobs, atol=1e-4, rtol=0)
    assert shared.kv_store.evictions > 0


# --- export / import --------------------------------------------------------------------------


def test_export_import_replays_the_tree(tiny_lm) -> None:
    session = StepSession(tiny_lm, PROMPT, settings={"top_k": 20})
    session.greedy(3)
    session.undo(2)
    session.sample({"temperature": 1.2}, seed=5)
    session.force(" yes")
    session.switch_to(session.branches()[0].node_id)
    session.undo()
    data = json.loads(session_to_json(session))
    replayed = session_from_json(tiny_lm, json.dumps(data))
    assert replayed.token_ids == session.token_ids and replayed.prompt_ids == session.prompt_ids
    assert [(n.parent, n.token_id, n.token and n.token.source) for n in replayed.nodes] == [
        (n.parent, n.token_id, n.token and n.token.source) for n in session.nodes
    ]
    assert replayed.settings == session.settings and replayed.settings.top_k == 20
    torch.testing.assert_close(
        [e.logprob for e in replayed.ledger], [e.logprob for e in session.ledger], atol=1e-4, rtol=0
    )
    assert [b.text for b in replayed.branches()] == [b.text for b in session.branches()]
    assert [c.token_id for c in replayed.candidates(5)] == [c.token_id for c in session.candidates(5)]


def test_use_settings_is_what_export_writes(tiny_lm) -> None:
    session = StepSession(tiny_lm, PROMPT)
    chosen = session.use_settings({"temperature": 0.7, "top_k": 5, "top_p": 0.9})
    assert session.settings == chosen and chosen.top_k == 5
    assert json.loads(session_to_json(session))["settings"] == chosen.to_dict()
    with pytest.raises(PlaygroundError, match="-1"):
        session.use_settings({"top_k": -1})
    assert session.settings == chosen  # a bad value changes nothing


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format="something else"), "format"),
        (lambda d: d.update(version=99), "99"),
        (lambda d: d["nodes"][0].update(parent=7), "parent 7"),
        (lambda d: d["nodes"][0].update(token_id=10**7), "10000000"),
        (lambda d: d["nodes"][0].update(source="magic"), "magic"),
        (lambda d: d.update(current=42), "42"),
        (lambda d: d.update(prompt_ids=[1, 2, 3]), "tokenizer"),
        (lambda d: d["settings"].update(temperature=-2), "-2"),
        (lambda d: d.update(nodes="none"), "nodes"),
    ],
)
def test_import_rejects_bad_files(tiny_lm, change, message) -> None:
    session = StepSession(tiny_lm, PROMPT)
    session.greedy(2)
    data = session_to_dict(session)
    change(data)
    with pytest.raises(PlaygroundError, match=message):
        session_from_dict(tiny_lm, data)
    with pytest.raises(PlaygroundError, match="JSON"):
        session_from_json(tiny_lm, "{not json")


class NoBosTokenizer:
    """The embedded tokenizer, minus its start-of-text token."""

    bos_token_id = None

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __call__(self, *args, **kwargs):
        return self.tokenizer(*args, **kwargs)


def test_encode_prompt_refuses_empty_prompt_without_bos(tiny_lm) -> None:
    assert encode_prompt(tiny_lm.tokenizer, "", False) == [tiny_lm.tokenizer.bos_token_id]
    no_bos = NoBosTokenizer(tiny_lm.tokenizer)
    with pytest.raises(PlaygroundError, match="empty"):
        encode_prompt(no_bos, "", False)
    with pytest.raises(PlaygroundError, match="chat template"):
        encode_prompt(no_bos, "hi", True)


# --- non-ASCII text: decode whole sequences, never join single-token decodes ------------------

MULTIBYTE = " 東京 😀 café"  # CJK and an emoji split over byte tokens, an accented letter


def test_multibyte_text_round_trips(tiny_lm) -> None:
    tokenizer = tiny_lm.tokenizer
    ids = tokenizer(MULTIBYTE, add_special_tokens=False).input_ids
    assert "\ufffd" in "".join(tokenizer.decode([i]) for i in ids)  # joining pieces corrupts it
    session = StepSession(tiny_lm, PROMPT)
    session.force(MULTIBYTE)
    assert session.token_ids == ids and session.text == MULTIBYTE
    assert [b.text for b in session.branches()] == [MULTIBYTE]
    pieces = stream_pieces(tokenizer, session.ids, len(session.prompt_ids))
    assert len(pieces) == len(ids) and "".join(pieces) == MULTIBYTE
    assert "" in pieces and "\ufffd" not in "".join(pieces)  # a byte token waits for the rest


def test_stream_pieces_concatenate_to_the_whole_decode(tiny_lm) -> None:
    tokenizer = tiny_lm.tokenizer
    ids = tokenizer("Paris é 東京 😀 café\n  end", add_special_tokens=False).input_ids
    whole = decode_ids(tokenizer, ids)
    starts = [n for n in range(len(ids)) if not decode_ids(tokenizer, ids[:n]).endswith("\ufffd")]
    assert len(starts) > 5  # every split on a character boundary
    for start in starts:
        pieces = stream_pieces(tokenizer, ids, start)
        assert decode_ids(tokenizer, ids[:start]) + "".join(pieces) == whole, start
