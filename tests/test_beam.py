"""Beam search engine and tree figure: parity with generate, tree invariants, bad input."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import threading

import pytest
import torch

from playground import beam
from playground.beam import FINISHED, KEPT, PRUNED, ROOT, BeamTree, beam_search
from playground.beam import search as beam_search_module
from playground.engine.local import LocalEngine
from playground.errors import PlaygroundError
from playground.plots.beam import beam_tree_figure, early_stopping_word, figure_config
from tests.conftest import make_tiny_llama

CAPITAL = "What is the capital of France?"


def generate_beams(lm: LocalEngine, tree: BeamTree):
    """Plain transformers beam search with the tree's settings on the tree's prompt ids."""
    s = tree.settings
    ids = torch.tensor([tree.prompt_ids], device=lm.device)
    with lm.lock, torch.inference_mode():
        return lm.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            num_beams=s.num_beams,
            num_return_sequences=s.num_return_sequences,
            do_sample=False,
            length_penalty=s.length_penalty,
            early_stopping=s.early_stopping,
            max_new_tokens=s.max_new_tokens,
            output_scores=True,
            return_dict_in_generate=True,
        )


def assert_parity(lm: LocalEngine, tree: BeamTree) -> None:
    out = generate_beams(lm, tree)
    prompt_len = len(tree.prompt_ids)
    assert out.sequences[:, :prompt_len].tolist() == [tree.prompt_ids] * len(tree.sequences)
    assert tree.sequences == out.sequences[:, prompt_len:].tolist()
    assert len(tree.scores) == tree.settings.num_return_sequences
    assert torch.allclose(torch.tensor(tree.scores), out.sequences_scores.float().cpu(), atol=1e-4, rtol=0)


# --- parity on the embedded model -----------------------------------------------------------

EMBEDDED_CASES = [
    # prompt, chat, beams, steps, length_penalty, early_stopping, num_return_sequences
    ("The capital of France is", False, 4, 10, 1.0, False, None),
    ("The capital of France is", False, 4, 10, 0.5, True, 2),
    ("Once upon a time, in a small village,", False, 3, 10, 2.0, False, None),
    ("Once upon a time, in a small village,", False, 3, 10, 0.5, "never", None),
    (CAPITAL, True, 3, 12, 0.5, False, None),
    (CAPITAL, True, 3, 12, 2.0, True, None),
    (CAPITAL, True, 4, 12, 1.0, "never", 3),
    ("Name a colour.", True, 3, 10, 2.0, False, None),
]


@pytest.mark.parametrize(("prompt", "chat", "beams", "steps", "penalty", "early", "returned"), EMBEDDED_CASES)
def test_parity_with_generate_on_the_embedded_model(
    embedded_lm, prompt, chat, beams, steps, penalty, early, returned
):
    tree = beam_search(embedded_lm, prompt, beams, steps, penalty, early, returned, chat=chat)
    assert_parity(embedded_lm, tree)


@pytest.fixture(scope="module")
def capital_tree(embedded_lm) -> BeamTree:
    """A chat search whose answers end with <|im_end|> inside the window, plus the greedy path."""
    return beam_search(embedded_lm, CAPITAL, 3, 12, 1.0, False, chat=True, include_greedy=True)


def test_the_capital_search_really_finishes_hypotheses_with_eos(embedded_lm, capital_tree):
    """Makes sure the parity cases above exercise finishing, not only the length limit."""
    assert_parity(embedded_lm, capital_tree)
    ended_early = [h for h in capital_tree.hypotheses if h.token_ids[-1] in capital_tree.eos_token_ids]
    assert ended_early and all(len(h.token_ids) < 12 for h in ended_early)
    assert "Paris" in capital_tree.hypotheses[0].text


# --- parity on tiny random models (fast: broad grid, processors, several EOS ids) -----------


@pytest.fixture(scope="module")
def tiny_many_eos(embedded_lm) -> LocalEngine:
    """A tiny model whose 3 favourite first tokens are all EOS ids: beams finish all the time,
    and K = (1 + 3 EOS) * beams contenders per step, as in generate."""
    lm = make_tiny_llama(embedded_lm.tokenizer, seed=3)
    ids = torch.tensor([embedded_lm.tokenizer("Hello there").input_ids])
    with torch.inference_mode():
        favourites = lm.model(ids).logits[0, -1].topk(3).indices.tolist()
    lm.model.generation_config.eos_token_id = favourites
    return lm


@pytest.mark.parametrize("beams", [2, 5, 8])
@pytest.mark.parametrize(("penalty", "early"), [(-1.0, False), (0.5, True), (2.0, "never"), (1.0, False)])
def test_parity_on_a_tiny_model_with_three_eos_ids(tiny_many_eos, beams, penalty, early):
    tree = beam_search(tiny_many_eos, "Hello there", beams, 9, penalty, early)
    assert_parity(tiny_many_eos, tree)
    assert any(n.ended and n.step < 9 for n in tree.nodes), "EOS tokens should end some candidates early"


def test_parity_with_the_models_logits_processors(embedded_lm):
    """generate applies repetition penalty / no-repeat-ngram from the generation config: so do we."""
    lm = make_tiny_llama(embedded_lm.tokenizer, seed=1)
    lm.model.generation_config.repetition_penalty = 1.8
    lm.model.generation_config.no_repeat_ngram_size = 2
    tree = beam_search(lm, "one two one two", 4, 10, 1.0, False)
    assert_parity(lm, tree)
    plain = make_tiny_llama(embedded_lm.tokenizer, seed=1)
    assert beam_search(plain, "one two one two", 4, 10, 1.0, False).sequences != tree.sequences


def test_the_model_lock_is_held_per_forward_not_for_the_whole_search(embedded_lm):
    """Other users' requests get the model between the search's forwards; each forward (and the
    greedy generate) still runs under lm.lock."""
    lm = make_tiny_llama(embedded_lm.tokenizer, seed=2)
    held_in_forward: list[bool] = []
    free_between: list[bool] = []

    def another_user_tries_the_lock() -> None:
        got = lm.lock.acquire(blocking=False)
        free_between.append(got)
        if got:
            lm.lock.release()

    def progress(done: int, total: int) -> None:
        thread = threading.Thread(target=another_user_tries_the_lock)
        thread.start()
        thread.join()

    hook = lm.model.register_forward_pre_hook(lambda *_: held_in_forward.append(lm.lock._is_owned()))
    try:
        tree = beam_search(lm, "Hello there", 3, 6, include_greedy=True, progress=progress)
    finally:
        hook.remove()
    assert len(held_in_forward) > tree.steps_run and all(held_in_forward)
    assert len(free_between) == tree.steps_run and all(free_between)
    assert_parity(lm, tree)


# --- tree data --------------------------------------------------------------------------------


def test_kept_nodes_descend_from_kept_nodes_and_leaves_have_no_children(capital_tree):
    nodes = capital_tree.nodes
    assert nodes[0].fate == ROOT and nodes[0].parent is None and nodes[0].token is None
    for node in nodes[1:]:
        parent = nodes[node.parent]
        assert parent.fate in (KEPT, ROOT), f"#{node.id} grows from a {parent.fate} node"
        assert node.step == parent.step + 1
        if node.fate in (PRUNED, FINISHED):
            assert capital_tree.children(node.id) == []


def test_every_step_keeps_num_beams_live_beams(capital_tree):
    per_step = [sum(n.fate == KEPT and n.step == s for n in capital_tree.nodes) for s in range(1, 13)]
    run = capital_tree.steps_run
    assert per_step[: run - 1] == [3] * (run - 1)
    assert sum(per_step[run:]) == 0


def test_fates_follow_the_scores(capital_tree):
    """At each step no pruned, unfinished candidate beats a kept one (else it would be kept)."""
    for step in range(1, capital_tree.steps_run + 1):
        nodes = [n for n in capital_tree.nodes if n.step == step]
        kept = [n.cum_logprob for n in nodes if n.fate == KEPT]
        losers = [n.cum_logprob for n in nodes if n.fate == PRUNED and not n.ended]
        if kept and losers:
            assert max(losers) <= min(kept) + 1e-6
        assert all(n.ended for n in nodes if n.fate == FINISHED)


def test_scores_add_up_along_paths(capital_tree):
    penalty = capital_tree.settings.length_penalty
    for node in capital_tree.nodes[1:]:
        parent = capital_tree.nodes[node.parent]
        assert node.logprob <= 0
        assert node.cum_logprob == pytest.approx(parent.cum_logprob + node.logprob, abs=1e-4)
        assert node.score == pytest.approx(node.cum_logprob / node.step**penalty, rel=1e-6)


def test_recorded_logprobs_match_a_fresh_forward_pass(embedded_lm, capital_tree):
    """Independent check of the numbers on the nodes: one uncached forward over the best path."""
    best = capital_tree.hypotheses[0]
    ids = torch.tensor([capital_tree.prefix_ids(best.node_id)])
    with torch.inference_mode():
        logprobs = torch.log_softmax(embedded_lm.model(ids).logits[0].float(), dim=-1)
    prompt_len = len(capital_tree.prompt_ids)
    for node in capital_tree.path(best.node_id):
        position = prompt_len + node.step - 1
        assert node.logprob == pytest.approx(float(logprobs[position - 1, node.token_id]), abs=2e-3)


def test_hypotheses_match_the_returned_sequences(capital_tree):
    tree = capital_tree
    assert [h.rank for h in tree.hypotheses] == list(range(1, len(tree.hypotheses) + 1))
    assert [h.score for h in tree.hypotheses] == tree.scores == sorted(tree.scores, reverse=True)
    for hyp, row in zip(tree.hypotheses, tree.sequences, strict=True):
        node = tree.nodes[hyp.node_id]
        assert node.fate == FINISHED and node.rank == hyp.rank and node.ended
        assert hyp.token_ids == [n.token_id for n in tree.path(hyp.node_id)]
        assert row == hyp.token_ids + [tree.pad_token_id] * (len(row) - len(hyp.token_ids))
        assert hyp.score == pytest.approx(node.score, abs=1e-4)
        assert tree.prefix_ids(hyp.node_id) == tree.prompt_ids + hyp.token_ids
    assert sum(n.rank is not None for n in tree.nodes) == len(tree.hypotheses)


def test_each_expanded_beam_records_its_best_candidates(capital_tree):
    tree = capital_tree
    for node in [tree.nodes[0], *[n for n in tree.nodes if n.fate == KEPT and n.step < tree.steps_run]]:
        children = tree.children(node.id)
        assert len(children) >= tree.settings.candidates_per_beam
        cums = [tree.nodes[c].cum_logprob for c in children]
        assert cums == sorted(cums, reverse=True)


def test_greedy_path_follows_the_top_child(capital_tree):
    greedy = capital_tree.greedy
    assert greedy and greedy[0].node_id is not None
    first = capital_tree.nodes[greedy[0].node_id]
    assert first.parent == 0 and first.id == capital_tree.children(0)[0]
    for token in greedy:
        if token.node_id is not None:
            assert capital_tree.nodes[token.node_id].token_id == token.token.id
            assert capital_tree.nodes[token.node_id].step == token.step


def test_json_round_trip(capital_tree):
    data = json.loads(json.dumps(capital_tree.to_dict()))
    again = BeamTree.from_dict(data)
    assert again.to_dict() == capital_tree.to_dict()
    assert again.children(0) == capital_tree.children(0)


def test_progress_is_reported_every_step(tiny_lm):
    calls = []
    tree = beam_search(tiny_lm, "Hello", 2, 5, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(step, 5) for step in range(1, tree.steps_run + 1)]


def test_one_beam_runs_beam_search_with_a_single_beam(tiny_lm):
    tree = beam_search(tiny_lm, "Hello", 1, 6)
    assert len(tree.sequences) == 1 and all(n.step <= 6 for n in tree.nodes)
    assert all(sum(n.fate == KEPT and n.step == s for n in tree.nodes) <= 1 for s in range(1, 7))


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_beams": 0}, "Beams must be a whole number from 1 to 16, got 0"),
        ({"num_beams": 17}, "got 17"),
        ({"num_beams": 2.5}, "got 2.5"),
        ({"max_new_tokens": 0}, "Steps (max new tokens) must be a whole number from 1 to 64, got 0"),
        ({"max_new_tokens": 65}, "got 65"),
        ({"prompt": "   "}, "The prompt is empty"),
        ({"length_penalty": math.nan}, "Length penalty must be a number"),
        ({"early_stopping": "maybe"}, "got 'maybe'"),
        ({"num_return_sequences": 5}, "Returned sequences must be a whole number from 1 to 4, got 5"),
    ],
)
def test_bad_settings_are_refused_with_the_bad_value(tiny_lm, kwargs, message):
    args = {"prompt": "Hello", "num_beams": 4, "max_new_tokens": 5, **kwargs}
    with pytest.raises(PlaygroundError) as info:
        beam_search(tiny_lm, **args)
    assert message in str(info.value)


def test_prompt_longer_than_the_context_is_refused(tiny_lm):
    with pytest.raises(PlaygroundError, match=r"over the model's context of 512"):
        beam_search(tiny_lm, "word " * 505, 2, 10)


def test_search_bigger_than_free_memory_is_refused(tiny_lm, monkeypatch):
    settings = beam.check_settings(16, 64, 1.0, False, None, False)
    needed = beam.search_bytes(tiny_lm, 10, settings)
    monkeypatch.setattr(beam_search_module, "free_bytes", lambda engine: needed)  # 80% of it is allowed
    with pytest.raises(PlaygroundError, match=r"needs about .* MiB .* fewer beams \(16\)"):
        beam_search(tiny_lm, "Hello", 16, 64)
    monkeypatch.setattr(beam_search_module, "free_bytes", lambda engine: 2 * needed)
    beam.check_fits(tiny_lm, 10, settings)  # fits in twice the estimate
    assert beam.search_bytes(tiny_lm, 10, dataclasses.replace(settings, num_beams=8)) < needed


def test_chat_without_a_template_is_refused(tiny_lm):
    class NoTemplate:
        chat_template = None

        def __getattr__(self, name):
            return getattr(tiny_lm.tokenizer, name)

    lm = copy.copy(tiny_lm)
    lm.tokenizer = NoTemplate()
    with pytest.raises(PlaygroundError, match="no chat template"):
        beam_search(lm, "Hello", 2, 3, chat=True)


# --- figure -----------------------------------------------------------------------------------


def traces(fig) -> dict:
    return {trace["name"]: trace for trace in fig.to_dict()["data"]}


def test_figure_draws_every_kept_and_finished_node_coloured_by_score(capital_tree):
    data = traces(beam_tree_figure(capital_tree))
    live = data["kept (circle) / finished (square)"]
    expected = {n.id: n for n in capital_tree.nodes if n.fate in (KEPT, FINISHED)}
    ids = [row[5] for row in live["customdata"]]
    assert sorted(ids) == sorted(expected)
    rows = zip(ids, live["x"], live["marker"]["color"], live["text"], live["customdata"], strict=True)
    for node_id, x, color, text, row in rows:
        node = expected[node_id]
        assert x == node.step and color == pytest.approx(node.score)
        assert row[0] == node.label and text in ("", node.label)  # hover always, a label where it fits
    assert sum(bool(t) for t in live["text"]) >= 0.6 * len(ids)  # a 3 x 12 tree has room for most
    assert "log-prob" in live["hovertemplate"] and "normalised score" in live["hovertemplate"]


def test_figure_greys_the_best_pruned_candidates_per_node(capital_tree):
    for per_parent in (0, 1, 3):
        data = traces(beam_tree_figure(capital_tree, pruned_per_parent=per_parent, show_greedy=False))
        pruned_ids = [row[5] for row in data["pruned"]["customdata"]]
        assert all(capital_tree.nodes[i].fate == PRUNED for i in pruned_ids)
        shown: dict[int, list[int]] = {}
        for i in pruned_ids:
            shown.setdefault(capital_tree.nodes[i].parent, []).append(i)
        for node in capital_tree.nodes:
            pruned = [c for c in capital_tree.children(node.id) if capital_tree.nodes[c].fate == PRUNED]
            assert sorted(shown.get(node.id, [])) == sorted(pruned[:per_parent])  # the best ones


def test_figure_marks_hypotheses_with_rank_and_score(capital_tree):
    hyps = traces(beam_tree_figure(capital_tree))["returned hypotheses"]
    assert hyps["text"] == [f"#{h.rank} {h.score:.3f}" for h in capital_tree.hypotheses]
    assert hyps["x"] == [capital_tree.nodes[h.node_id].step for h in capital_tree.hypotheses]


def test_figure_overlays_the_greedy_path(capital_tree):
    data = traces(beam_tree_figure(capital_tree))
    line = data["greedy path"]
    assert line["x"] == [0] + [t.step for t in capital_tree.greedy]
    assert "greedy path" not in traces(beam_tree_figure(capital_tree, show_greedy=False))


def test_figure_layout_pans_and_zooms_and_downloads_svg(capital_tree):
    layout = beam_tree_figure(capital_tree).to_dict()["layout"]
    assert layout["dragmode"] == "pan" and layout["xaxis"]["title"]["text"] == "step"
    assert "early stopping off (" in layout["title"]["text"]  # the control's word, not False
    assert [early_stopping_word(v) for v in (False, True, "never")] == ["off", "on", "never"]
    config = figure_config("svg")
    assert config["scrollZoom"] is True and config["toImageButtonOptions"]["format"] == "svg"
    assert config["toImageButtonOptions"]["scale"] >= 2  # presentation resolution
    with pytest.raises(ValueError, match="jpeg"):
        figure_config("jpeg")


def test_figure_stays_drawable_for_8_beams_and_30_steps(tiny_lm):
    tree = beam_search(tiny_lm, "Hello", 8, 30, include_greedy=True)
    fig = beam_tree_figure(tree)
    data = traces(fig)
    ys = data["kept (circle) / finished (square)"]["y"]
    assert len(set(zip(data["kept (circle) / finished (square)"]["x"], ys, strict=True))) == len(ys)
    assert 360 <= fig.layout.height <= 600  # the whole tree in a 720 px high window
