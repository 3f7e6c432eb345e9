"""Beam search tab: handlers as plain functions, then one search through the launched app."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from gradio_client.exceptions import AppError

from playground import beam
from playground.beam import FINISHED, BeamNode, BeamTree, GreedyToken
from playground.beam import search as beam_search_module
from playground.engine.records import TokenRecord
from playground.engine.tokens import cut_off_shown, decode_ids
from playground.errors import Cancelled, PlaygroundError
from playground.tree import GenerationTree
from playground.ui.beam_tab import (
    RUN_OUTPUTS,
    BeamHandlers,
    export_json,
    hypothesis_rows,
    markdown_text,
    node_choices,
    node_prefix,
    parse_early_stopping,
    status_markdown,
)
from playground.workspace import Workspaces

MULTIBYTE = " 東京 😀 café"  # CJK and an emoji split over byte tokens, an accented letter
TAB = SimpleNamespace(session_hash="beam-tab")


def no_progress(*args: object, **kwargs: object) -> None:
    return None


@pytest.fixture(scope="module")
def run(tiny_lm):
    handlers = BeamHandlers(tiny_lm, Workspaces(tiny_lm))
    views = handlers.beam_run(
        "Hello there", False, 3, 6, 1.0, "on", 1, True, "svg", TAB, progress=no_progress
    )
    return SimpleNamespace(
        handlers=handlers, views=views, tree=handlers.workspaces.get(TAB.session_hash).beam
    )


def test_run_returns_every_view(run):
    views, tree = run.views, run.tree
    assert set(views) == set(RUN_OUTPUTS)
    assert isinstance(tree, BeamTree) and tree.settings.early_stopping is True and tree.greedy
    figure = json.loads(views["plot"].plot)
    assert figure["config"]["toImageButtonOptions"]["format"] == "svg" and figure["config"]["scrollZoom"]
    assert {trace["name"] for trace in figure["data"]} >= {"pruned", "returned hypotheses", "greedy path"}
    assert f"**{tree.steps_run} steps**" in views["status"] and tree.stop_reason in views["status"]
    rows = views["table"]["data"]
    assert [row[0] for row in rows] == [1, 2, 3] and [row[1] for row in rows] == [
        round(s, 4) for s in tree.scores
    ]
    nodes = views["node"]
    assert nodes.choices[0][1] == 0 and [value for _, value in nodes.choices[1:4]] == [
        h.node_id for h in tree.hypotheses
    ]
    best = tree.hypotheses[0]
    assert nodes.value == best.node_id and views["export_file"] is None
    prefix = decode_ids(run.handlers.engine.tokenizer, tree.prefix_ids(best.node_id))
    assert views["prefix_text"] == cut_off_shown(prefix)


def test_texts_read_plain(run, tiny_lm):
    tree = run.tree
    assert markdown_text("a\nb *c*") == "a↵b \\*c\\*"
    assert [row[4] for row in hypothesis_rows(tree)] == [h.text for h in tree.hypotheses]  # no repr quotes
    assert "Best beam" in status_markdown(tree) and "Greedy" in status_markdown(tree)


def test_choosing_a_node_gives_its_prefix(run, tiny_lm):
    tree = run.tree
    node_id = tree.hypotheses[1].node_id
    text = run.handlers.beam_select_node(node_id, TAB)
    assert text == decode_ids(tiny_lm.tokenizer, tree.prefix_ids(node_id))
    assert run.handlers.workspaces.get(TAB.session_hash).beam_node == node_id
    clicked = run.handlers.beam_click_node(f"{node_id}:12345", 1, True, "svg", TAB)
    assert clicked["node"] == node_id and clicked["prefix_text"] == text  # and the plot, the node ringed
    assert json.loads(clicked["plot"].plot)["data"][-1]["name"] == "chosen node"
    assert run.handlers.beam_click_node("", 1, True, "svg", TAB) == {}
    with pytest.raises(PlaygroundError, match="not in this tree"):
        run.handlers.beam_select_node(10**6, TAB)
    with pytest.raises(PlaygroundError, match="Run a search first"):
        run.handlers.beam_select_node(1, SimpleNamespace(session_hash="no-search-yet"))


def test_node_list_puts_hypotheses_first_then_live_nodes(run):
    choices = node_choices(run.tree)
    ranked = [value for _, value in choices[1 : 1 + len(run.tree.hypotheses)]]
    assert ranked == [h.node_id for h in run.tree.hypotheses]
    assert "the prompt" in choices[0][0]


def test_redraw_and_export(run, tmp_path):
    redrawn = run.handlers.beam_redraw(0, False, "png", TAB)
    figure = json.loads(redrawn["plot"].plot)
    assert "greedy path" not in {trace["name"] for trace in figure["data"]}
    assert run.handlers.beam_redraw(0, False, "png", SimpleNamespace(session_hash="none")) == {}
    path = run.handlers.beam_export(TAB)
    assert (
        BeamTree.from_dict(json.loads(Path(path).read_text(encoding="utf-8"))).to_dict() == run.tree.to_dict()
    )
    with pytest.raises(PlaygroundError, match="Run a search first"):
        export_json(None)


def test_early_stopping_choices():
    assert [parse_early_stopping(v) for v in ("off", "on", "never", True)] == [False, True, "never", True]
    with pytest.raises(PlaygroundError, match="got 'sometimes'"):
        parse_early_stopping("sometimes")


def test_search_through_the_launched_app(app_client):
    """One real search through the API: the tree, the hypotheses, a node's prefix, the JSON export."""
    settings = ("What is the capital of France?", True, 3, 10, 1.0, "off", 2, True, "png")
    plot, status, table, nodes, prefix_text, export_file = app_client.predict(*settings, api_name="/beam_run")
    assert prefix_text.endswith("Paris.<|im_end|>") and export_file is None
    figure = json.loads(plot["plot"])
    assert "returned hypotheses" in {trace["name"] for trace in figure["data"]}
    assert "stopped:" in status and "Paris" in status
    assert table["headers"][:2] == ["rank", "score"] and len(table["data"]) == 3
    best_node = nodes["choices"][1][1]
    text = app_client.predict(best_node, api_name="/beam_select_node")
    assert text.startswith("<|im_start|>") and "Paris" in text
    exported = app_client.predict(api_name="/beam_export")
    data = json.loads(Path(exported).read_text(encoding="utf-8"))
    assert data["settings"]["num_beams"] == 3 and data["hypotheses"][0]["rank"] == 1
    with pytest.raises(AppError, match="The prompt is empty"):
        app_client.predict("  ", False, 2, 5, 1.0, "off", 2, True, "png", api_name="/beam_run")
    with pytest.raises(AppError, match="Beams must be a whole number from 1 to 16, got 0"):
        app_client.predict("Hi", False, 0, 5, 1.0, "off", 2, True, "png", api_name="/beam_run")
    with pytest.raises(
        AppError, match=r"Steps \(max new tokens\) must be a whole number from 1 to 64, got 500"
    ):
        app_client.predict("Hi", False, 2, 500, 1.0, "off", 2, True, "png", api_name="/beam_run")


def test_a_chosen_node_opens_in_step_by_step_with_its_numbers(tiny_lm):
    """The move beam node -> Step by step hands over the node's records: same ids, same numbers."""
    from playground.ui.step_tab import StepHandlers

    workspaces = Workspaces(tiny_lm)
    beam_handlers, step_handlers = BeamHandlers(tiny_lm, workspaces), StepHandlers(tiny_lm, workspaces)
    beam_handlers.beam_run("Hi", True, 2, 4, 1.0, "off", 1, False, "png", TAB, progress=no_progress)
    tree = workspaces.get(TAB.session_hash).beam
    node_id = tree.hypotheses[0].node_id
    beam_handlers.beam_select_node(node_id, TAB)
    view = step_handlers.step_open_beam_node(TAB)
    session = workspaces.get(TAB.session_hash).step
    assert session.ids == tree.prefix_ids(node_id) and view["chat"] is True
    assert [e.token for e in session.ledger] == tree.records(node_id)  # moved, not recomputed
    assert [row[2] for row in view["ledger"]["data"]] == ["beam"] * len(session.ledger)


def chain_tree(tree: BeamTree, token_ids: list[int]) -> BeamTree:
    """The tree's prompt followed by one chain of nodes for token_ids (each alone is U+FFFD)."""
    chain: GenerationTree[BeamNode] = GenerationTree(tree.prompt_ids, BeamNode)
    parent = 0
    for step, token in enumerate(token_ids, start=1):
        record = TokenRecord(token, "\ufffd", "?", False, -1.0, None, 1, 0.0, source="beam")
        parent = chain.add(
            parent, record, step=step, logprob=-1.0, cum_logprob=-step, score=-1.0, fate="kept"
        )
    return BeamTree(**{**vars(tree), "tree": chain})


def test_a_prefix_with_multibyte_characters_reads_whole(run, tiny_lm):
    tokenizer = tiny_lm.tokenizer
    ids = tokenizer(MULTIBYTE, add_special_tokens=False).input_ids
    tree = chain_tree(run.tree, ids)
    assert node_prefix(tree, len(ids), tokenizer) == tree.prompt_text + MULTIBYTE
    cut = next(n for n in range(1, len(ids)) if "\ufffd" in decode_ids(tokenizer, ids[:n]))
    assert node_prefix(tree, cut, tokenizer).endswith("…")  # a character's first bytes only: not "�"
    assert tree.prefix_ids(4)[len(tree.prompt_ids) :] == ids[:4]


def test_the_greedy_text_keeps_multibyte_characters_whole(tiny_lm, monkeypatch):
    ids = tiny_lm.tokenizer(MULTIBYTE, add_special_tokens=False).input_ids

    def fake_greedy(engine, prompt_ids, max_new_tokens, control=None):
        records = [TokenRecord(t, "\ufffd", "?", False, -1.0, None, 1, 0.0) for t in ids]
        return [GreedyToken(i, record, -float(i)) for i, record in enumerate(records, 1)]

    monkeypatch.setattr(beam_search_module, "greedy_path", fake_greedy)
    tree = beam.beam_search(tiny_lm, "東京 😀 café", 2, 3, include_greedy=True)
    assert tree.prompt_text == "東京 😀 café" and tree.greedy_text == MULTIBYTE
    assert f"tokens): {MULTIBYTE}" in status_markdown(tree)  # plain text, no repr quotes
    assert BeamTree.from_dict(tree.to_dict()).greedy_text == MULTIBYTE


assert FINISHED  # the fates are part of the public beam API


def test_stop_ends_a_running_search_at_its_next_step_and_draws_its_tree_so_far(tiny_lm):
    """Stop (from another request, as the button is) cancels the search through the engine's
    Control: it ends within a step, long before its 64 steps, and the tree it grew is drawn, marked
    stopped, its best beams as they stood ranked by score."""
    handlers = BeamHandlers(tiny_lm, Workspaces(tiny_lm))
    steps: list[int] = []

    def progress(value: object, **_: object) -> None:
        if isinstance(value, tuple):
            steps.append(value[0])
            if value[0] == 2:  # the button pressed while step 3 runs
                stopped.update(handlers.beam_stop(TAB))

    stopped: dict = {}
    views = handlers.beam_run(
        "Hello there", False, 4, 64, 1.0, "never", 1, False, "png", TAB, progress=progress
    )
    assert steps[-1] <= 3, f"the search ran on to step {steps[-1]} after Stop"
    assert stopped == {}  # the search's own last update says it (Stop's reply may come after it)
    ws = handlers.workspaces.get(TAB.session_hash)
    tree = ws.beam
    assert tree.stopped and tree.steps_run == steps[-1] and ws.running == {}
    assert views["status"].startswith(
        f"**Stopped by you at step {tree.steps_run} of 64**: the tree as it stood"
    )
    assert "**Best beam so far**" in views["status"] and len(views["table"]["data"]) == 4
    scores = [h.score for h in tree.hypotheses]
    assert scores == sorted(scores, reverse=True) and len(tree.sequences) == 4
    for h in tree.hypotheses:  # the beams as they stood: each a kept node of the last step
        node = tree.nodes[h.node_id]
        assert node.step == tree.steps_run and h.score == pytest.approx(node.cum_logprob / node.step)
    title = json.loads(views["plot"].plot)["layout"]["title"]["text"]
    assert f"(stopped by you at step {tree.steps_run} of 64)" in title
    assert f"由你在第 {tree.steps_run} 步（共 64 步）停止" in status_markdown(
        tree, "zh"
    )  # said in the page's language
    assert BeamTree.from_dict(json.loads(json.dumps(tree.to_dict()))).stopped  # a trace keeps the mark


def test_stop_before_the_first_step_keeps_the_tree_on_screen(tiny_lm, monkeypatch):
    handlers = BeamHandlers(tiny_lm, Workspaces(tiny_lm))
    handlers.beam_run("Hi", False, 2, 3, 1.0, "off", 1, False, "png", TAB, progress=no_progress)
    shown = handlers.workspaces.get(TAB.session_hash).beam

    def stopped_at_prefill(*args: object, **kwargs: object) -> None:
        raise Cancelled("stopped")

    monkeypatch.setattr(beam_search_module._Search, "run", stopped_at_prefill)
    views = handlers.beam_run(
        "Hello there", False, 4, 64, 1.0, "off", 1, False, "png", TAB, progress=no_progress
    )
    assert views == {"status": views["status"]}  # no plot, table or node change: the shown tree stays
    assert views["status"].startswith("**Stopped** by you: the search ended before its first step.")
    assert "Shown: the previous search." in views["status"]
    assert handlers.workspaces.get(TAB.session_hash).beam is shown


def test_stop_drops_a_search_still_waiting_in_the_queue_and_not_the_next_one(tiny_lm):
    """Run then Stop while the search waits for the model: Stop drops its ticket, so when its turn
    comes it ends before it began (no tree, no error); a later Run's search runs."""
    handlers = BeamHandlers(tiny_lm, Workspaces(tiny_lm))
    waiting = handlers.beam_ticket(TAB)["ticket"]
    stopped = handlers.beam_stop(TAB)["status"]
    assert stopped.startswith("**Stopped** by you: the search ended before it began.")
    args = ("Hi", False, 2, 3, 1.0, "off", 1, False, "png", TAB)
    assert handlers.beam_run(*args, progress=no_progress, ticket=waiting) == {}
    ws = handlers.workspaces.get(TAB.session_hash)
    assert ws.beam is None and ws.running == {}
    later = handlers.beam_ticket(TAB)["ticket"]
    assert later > waiting
    views = handlers.beam_run(*args, progress=no_progress, ticket=later)
    assert views["status"] and ws.beam is not None
