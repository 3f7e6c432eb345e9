"""Beam search tab: handlers as plain functions, then one search through the launched app."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gradio as gr
import pytest
from gradio_client.exceptions import AppError

from playground import beam
from playground.beam import FINISHED, KEPT, BeamNode, BeamTree, GreedyToken
from playground.errors import PlaygroundError
from playground.tokens import decode_ids
from playground.ui.beam_tab import (
    BeamHandlers,
    export_json,
    hypothesis_rows,
    markdown_text,
    node_choices,
    node_prefix,
    parse_early_stopping,
    status_markdown,
)

MULTIBYTE = " 東京 😀 café"  # CJK and an emoji split over byte tokens, an accented letter


def no_progress(*args: object, **kwargs: object) -> None:
    return None


@pytest.fixture(scope="module")
def run_outputs(tiny_lm):
    return BeamHandlers(tiny_lm).run(
        "Hello there", False, 3, 6, 1.0, "on", 1, True, "svg", progress=no_progress
    )


def test_run_returns_every_view(run_outputs):
    plot, status, rows, nodes, tree, prompt, chat, prefix_text, prefix_ids, export_file = run_outputs
    assert isinstance(tree, BeamTree) and tree.settings.early_stopping is True and tree.greedy
    figure = json.loads(plot.plot)
    assert figure["config"]["toImageButtonOptions"]["format"] == "svg" and figure["config"]["scrollZoom"]
    assert {trace["name"] for trace in figure["data"]} >= {"pruned", "returned hypotheses", "greedy path"}
    assert f"**{tree.steps_run} steps**" in status and tree.stop_reason in status
    assert [row[0] for row in rows] == [1, 2, 3] and [row[1] for row in rows] == [
        round(s, 4) for s in tree.scores
    ]
    assert nodes.choices[0][1] == 0 and [value for _, value in nodes.choices[1:4]] == [
        h.node_id for h in tree.hypotheses
    ]
    assert (prompt, chat, export_file) == ("Hello there", False, None)
    best = tree.hypotheses[0]
    assert prefix_ids == best.token_ids and prefix_text.startswith("Hello there")


def test_texts_read_plain(run_outputs, tiny_lm):
    tree = run_outputs[4]
    rows = hypothesis_rows(tree)
    assert [row[4] for row in rows] == [decode_ids(tiny_lm.tokenizer, h.token_ids) for h in tree.hypotheses]
    assert not any("␣" in row[4] for row in rows)
    assert markdown_text(" in a graph\r\n*x* <b>") == " in a graph↵\\*x\\* &lt;b&gt;"
    best = dataclasses.replace(tree.hypotheses[0], text="it's\na graph")
    status = status_markdown(dataclasses.replace(tree, hypotheses=[best]))
    assert "): it's↵a graph" in status and "'it" not in status


def test_choosing_a_node_gives_its_prefix(run_outputs, tiny_lm):
    tree = run_outputs[4]
    best = tree.hypotheses[0]
    text, ids = BeamHandlers(tiny_lm).select_node(tree, best.node_id)
    assert ids == best.token_ids and text == tree.prompt_text + best.text
    assert BeamHandlers(tiny_lm).select_node(tree, 0) == (tree.prompt_text, [])
    assert tree.nodes[best.node_id].fate == FINISHED
    with pytest.raises(PlaygroundError, match="Node #99999 is not in this tree"):
        node_prefix(tree, 99999, tiny_lm.tokenizer)
    with pytest.raises(PlaygroundError, match="Run a search first"):
        BeamHandlers(None).select_node(None, 3)


def test_node_list_puts_hypotheses_first_then_live_nodes(run_outputs):
    tree = run_outputs[4]
    labels = [label for label, _ in node_choices(tree)]
    assert labels[1].endswith("rank 1") and "· kept" in labels[len(tree.hypotheses) + 1]
    assert len(labels) == len(tree.nodes)


def test_redraw_and_export(run_outputs, tmp_path):
    tree = run_outputs[4]
    handlers = BeamHandlers(None)
    plain = json.loads(handlers.redraw(tree, 0, False, "png").plot)
    assert (
        "greedy path" not in {t["name"] for t in plain["data"]}
        and plain["config"]["toImageButtonOptions"]["format"] == "png"
    )
    assert handlers.redraw(None, 2, True, "png") == gr.skip()
    path = export_json(tree)
    assert BeamTree.from_dict(json.loads(Path(path).read_text(encoding="utf-8"))).to_dict() == tree.to_dict()
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


def test_a_chosen_prefix_opens_as_the_same_ids_in_a_step_session(tiny_lm):
    """What app.py hands the Step-by-step tab (searched prompt, chat, prefix ids) rebuilds the node."""
    from playground.stepper import StepSession

    outputs = BeamHandlers(tiny_lm).run("Hi", True, 2, 4, 1.0, "off", 1, False, "png", progress=no_progress)
    tree, searched_prompt, searched_chat = outputs[4], outputs[5], outputs[6]
    node_id = tree.hypotheses[0].node_id
    _, prefix_ids = BeamHandlers(tiny_lm).select_node(tree, node_id)
    session = StepSession(tiny_lm, searched_prompt, searched_chat)
    session.append_tokens(prefix_ids)
    assert session.ids == tree.prefix_ids(node_id)


def chain_tree(tree: BeamTree, token_ids: list[int]) -> BeamTree:
    """The tree's prompt followed by one chain of nodes for token_ids (each alone is U+FFFD)."""
    nodes = [tree.nodes[0]]
    for step, token in enumerate(token_ids, start=1):
        nodes.append(BeamNode(step, step, step - 1, token, "\ufffd", "?", -1.0, -step, -1.0, KEPT))
    return dataclasses.replace(tree, nodes=nodes, _children=None)


def test_a_prefix_with_multibyte_characters_reads_whole(run_outputs, tiny_lm):
    tokenizer = tiny_lm.tokenizer
    ids = tokenizer(MULTIBYTE, add_special_tokens=False).input_ids
    tree = chain_tree(run_outputs[4], ids)
    text, prefix_ids = BeamHandlers(tiny_lm).select_node(tree, len(ids))
    assert (text, prefix_ids) == (tree.prompt_text + MULTIBYTE, ids)
    assert node_prefix(tree, 4, tokenizer)[1] == ids[:4]


def test_the_greedy_text_keeps_multibyte_characters_whole(tiny_lm, monkeypatch):
    ids = tiny_lm.tokenizer(MULTIBYTE, add_special_tokens=False).input_ids

    def fake_greedy(lm, prompt_ids, max_new_tokens):
        return [GreedyToken(i, t, "\ufffd", "?", -1.0, -float(i)) for i, t in enumerate(ids, 1)]

    monkeypatch.setattr(beam, "greedy_path", fake_greedy)
    tree = beam.beam_search(tiny_lm, "東京 😀 café", 2, 3, include_greedy=True)
    assert tree.prompt_text == "東京 😀 café" and tree.greedy_text == MULTIBYTE
    assert f"tokens): {MULTIBYTE}" in status_markdown(tree)  # plain text, no repr quotes
    assert BeamTree.from_dict(tree.to_dict()).greedy_text == MULTIBYTE
