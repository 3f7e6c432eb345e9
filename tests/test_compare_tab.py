"""The Compare tab and the model picker through a launched app (gradio_client) on both real models,
SmolLM2 and Gemma 3 270M, loaded once per session and held in one app's registry: each side of a
compare run equals its solo run (two models; one model with two seeds; float32 against int8 weights),
cross-scoring equals score_text and align_scores, Step's candidates and the Tokens view equal each
model's own, a link reopens a comparison, a tab that picks Gemma chats, steps and measures on it
while the other tabs keep SmolLM2, and bad input (an unknown model, one that won't fit, a server
that is down, tokenizers that can't be aligned) is told in the tab's language while the other side
keeps answering."""

from __future__ import annotations

import re
import socket
from types import SimpleNamespace
from urllib.parse import parse_qsl

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from tokenizers import pre_tokenizers
from transformers import AutoTokenizer

from playground.chat import NO_TEMPLATE_NOTE, ChatRequest, run_chat
from playground.compare import first_difference
from playground.engine.remote.launcher import LlamaServer, llama_server_binary, why_no_binary
from playground.engine.sampling import SamplingSettings
from playground.models import ModelRegistry
from playground.scoring import score_text
from playground.settings import load_settings
from playground.step import StepSession
from playground.ui.app import build_demo, launch_local, launch_options
from playground.ui.compare import CompareHandlers, SidesInput, ViewInputs
from playground.ui.compare.scoring import aligned_rows
from playground.ui.links import make_query, read_query
from playground.workspace import Workspaces
from tests.conftest import make_tiny_llama

SMOL, GEMMA = "smollm2-135m-instruct", "gemma-3-270m"
QUESTION = "What is the capital of France?"
FREE: dict[str, int | None] = {
    "bytes": None
}  # the app's free memory as its registry reads it (None: unknown)
GB = 10**9
IDS = re.compile(r"\(id (\d+)\)")


def sides(a: str = SMOL, b: str = GEMMA, **overrides: object) -> dict[str, object]:
    values = dict(
        model_a=a,
        quantize_a="none",
        temperature_a=0,
        seed_a="",
        model_b=b,
        quantize_b="none",
        temperature_b=0,
    )
    return {**values, "seed_b": "", **overrides}


@pytest.fixture(scope="module")
def app(embedded_lm, gemma_lm):
    """One app whose registry holds both real models (Gemma held as a tab would: never unloaded)."""
    settings = load_settings(max_models=3)
    registry = ModelRegistry(settings, free_bytes=lambda: FREE["bytes"])
    registry.add(None, embedded_lm)
    registry.hold(registry.add(GEMMA, gemma_lm, pinned=False))
    workspaces = Workspaces(embedded_lm, settings.max_workspaces, registry)
    demo = build_demo(embedded_lm, settings, workspaces=workspaces)
    url = launch_local(demo, **launch_options())
    yield SimpleNamespace(
        url=url, registry=registry, workspaces=workspaces, engines={SMOL: embedded_lm, GEMMA: gemma_lm}
    )
    demo.close()


@pytest.fixture(scope="module")
def client(app):
    return Client(app.url, verbose=False)


def compare_chat(client: Client, max_new: int = 8, **side_values: object) -> dict[str, object]:
    """The last value of a /compare_chat call, by output name."""
    values = client.predict(
        compare_message=QUESTION,
        compare_system="",
        compare_max_new_tokens=max_new,
        **side_values,
        api_name="/compare_chat",
    )
    names = ["parting", "a_title", "a", "a_stats", "b_title", "b", "b_stats", "status_a", "status_b"]
    return dict(zip([*names, "context", "chat", "text_a", "text_b", "list_a", "list_b"], values, strict=True))


def solo(engine, max_new: int, temperature: float = 0, seed: int | None = None):
    request = ChatRequest(
        [{"role": "user", "content": QUESTION}], "", SamplingSettings(temperature=temperature), max_new, seed
    )
    return run_chat(engine, request)


# --- chat: each side is its solo run -------------------------------------------------------------


def test_each_side_of_a_two_model_chat_equals_its_solo_run(app, client):
    shown = compare_chat(client, **sides())
    for letter, name in (("a", SMOL), ("b", GEMMA)):
        alone = solo(app.engines[name], 8)
        shown_ids = [t.id for t in alone.tokens if not t.special]  # an end token has no card
        assert [int(i) for i in IDS.findall(shown[letter])] == shown_ids and shown_ids, name
        assert shown[f"text_{letter}"] == alone.text
        assert f"generated {len(alone.answer_ids)} tokens" in shown[f"{letter}_stats"]
    assert NO_TEMPLATE_NOTE in shown["b_stats"] and NO_TEMPLATE_NOTE not in shown["a_stats"]
    at = first_difference(shown["text_a"], shown["text_b"])
    assert shown["parting"].startswith(f"**The answers part at character {at}:**")
    assert shown["a"].count("tok-parting") == shown["b"].count("tok-parting") == 1
    assert shown["context"] == QUESTION and shown["chat"] is True  # Cross-scoring holds them now


def test_one_model_with_two_seeds_gives_each_seed_its_solo_answer(app, client):
    hot = sides(SMOL, SMOL, temperature_a=0.9, seed_a="1", temperature_b=0.9, seed_b="2")
    shown = compare_chat(client, max_new=10, **hot)
    alone = [solo(app.engines[SMOL], 10, 0.9, seed) for seed in (1, 2)]
    assert [shown["text_a"], shown["text_b"]] == [a.text for a in alone] and alone[0].text != alone[1].text
    assert shown["a_title"] == f"**A: {SMOL} · temperature 0.9 · seed 1**"


def test_float32_against_int8_weights_loads_the_side_with_its_estimate_first(app, client):
    job = client.submit(
        compare_message=QUESTION,
        compare_system="",
        compare_max_new_tokens=6,
        **sides(SMOL, SMOL, quantize_b="int8"),
        api_name="/compare_chat",
    )
    *_, text_a, text_b, _, list_b = job.result()
    assert (f"{SMOL}@int8 · loaded", f"{SMOL}@int8") in [tuple(c) for c in list_b["choices"]]
    statuses = [str(update[8]) for update in job.outputs() if isinstance(update[8], str) and update[8]]
    try:
        assert statuses[0].startswith(f"**Loading {SMOL}@int8**") and "Memory estimate:" in statuses[0]
        int8 = app.registry.engine(SMOL, quantize="int8")
        assert int8.quantization == "int8"
        assert [text_a, text_b] == [solo(app.engines[SMOL], 6).text, solo(int8, 6).text]
    finally:
        app.registry.unload(f"{SMOL}@int8")


# --- cross-scoring, step, tokens: each model's own numbers --------------------------------------------


def test_cross_scoring_scores_each_text_by_both_models_aligned_by_characters(app, client):
    context, text = "今天天气", "很好，我们去公园吧。"
    values = client.predict(
        score_context=context,
        score_chat=False,
        score_a=text,
        score_b=" Paris.",
        compare_system="",
        **sides(),
        api_name="/compare_score",
    )
    a_title, a_view, a_summary, a_table = values[:4]
    smol, gemma = (score_text(app.engines[name], context, text) for name in (SMOL, GEMMA))
    assert a_title == f"**Text A** scored by side B's model ({GEMMA})"
    assert [int(i) for i in IDS.findall(a_view)] == gemma.ids  # A's text in B's tokens, B's numbers
    assert f"{gemma.tokens[0].logprob:.3f}" in a_view and f"{gemma.tokens[0].rank:,}" in a_view
    assert f"Under **{GEMMA}**: log p = {gemma.logprob:.2f} over {len(gemma.tokens)} tokens" in a_summary
    assert f"Under **{SMOL}** (its own model): log p = {smol.logprob:.2f}" in a_summary
    assert a_table["data"] == aligned_rows(smol, gemma) and a_table["data"][0][:2] == ["很好", 4]
    assert a_table["headers"][-1] == "A − B (nats)"
    b_view, b_table = values[5], values[7]
    assert [int(i) for i in IDS.findall(b_view)] == score_text(app.engines[SMOL], context, " Paris.").ids
    assert len(b_table["data"]) == 2  # ␣Paris | . : one token each under both models


def test_step_lists_both_models_candidates_after_one_prefix(app, client):
    prefix = "The capital of France is"
    values = client.predict(
        step_prefix=prefix, step_chat=False, step_k=5, **sides(), api_name="/compare_step"
    )
    for table, name in ((values[1], SMOL), (values[4], GEMMA)):
        session = StepSession(app.engines[name], prefix)
        own = session.candidates(5)
        session.release()
        assert [row[2] for row in table["data"]] == [c.token_id for c in own]
        assert [row[3] for row in table["data"]] == [round(c.prob, 4) for c in own]
    assert values[1]["data"][0][1] == "␣Paris"


def test_the_tokens_view_cuts_one_text_with_both_tokenizers(app, client):
    text = "今天天气很好"
    ratio, _, a_view, a_summary, _, b_view, b_summary, *_ = client.predict(
        tokens_text=text, **sides(), api_name="/compare_tokens"
    )
    ids = {
        name: app.engines[name].tokenizer(text, add_special_tokens=False).input_ids for name in (SMOL, GEMMA)
    }
    assert len(ids[GEMMA]) == 3 and len(ids[SMOL]) > 3
    for view, summary, name in ((a_view, a_summary, SMOL), (b_view, b_summary, GEMMA)):
        assert re.findall(r"<span style='background:[^']*'>(\d+)</span>", view) == [str(i) for i in ids[name]]
        assert summary.startswith(f"**{len(ids[name])} tokens** for 6 characters")
    assert "<b>今</b> = 2 byte tokens" in a_view and "byte tokens" not in b_view
    assert ratio.startswith(f"**{GEMMA} needs {len(ids[GEMMA]) / len(ids[SMOL]):.2f}× the tokens of {SMOL}**")


def test_a_link_reopens_the_comparison(app, client):
    client.predict(tokens_text="unbelievable", **sides(), api_name="/compare_tokens")
    kv = ("Llama-3.1-8B", 1, 1, "float16", "ideal", 80, "bfloat16")  # the KV tab's controls (unused here)
    query = client.predict("compare", *kv, api_name="/share_link")
    assert query == (
        f"tab=compare&view=tokens&a={SMOL}&qa=none&ta=0&b={GEMMA}&qb=none&tb=0&text=unbelievable&lang=en"
    )
    opened = dict(parse_qsl(query))
    assert read_query(opened).link.values["tokens_text"] == "unbelievable"
    # the page load (compare_from_link) puts the link's values on the controls and runs its view
    handlers = CompareHandlers(app.workspaces, load_settings())
    request = SimpleNamespace(session_hash="link-tab", query_params=opened, headers={})
    controls = ViewInputs("chat", QUESTION, "", 8, "", True, "", "", "", False, 10, "another text")
    shown = list(handlers.compare_from_link(SidesInput(**sides(GEMMA, GEMMA)), controls, request))
    assert shown[0]["tokens_text"] == "unbelievable" and shown[0]["model_a"] == SMOL
    assert shown[0]["compare_views"].selected == "compare-tokens"
    assert shown[-1]["tokens_ratio"].startswith(f"**{GEMMA} needs")
    assert make_query("compare", {"compare_view": "chat", "seed_b": "7"}) == "tab=compare&view=chat&sb=7"


# --- the picker: a tab keeps its model ------------------------------------------------------------


def test_a_tab_that_picks_gemma_chats_steps_and_measures_on_it(app):
    tab, other = Client(app.url, verbose=False), Client(app.url, verbose=False)
    choices, status = tab.predict(GEMMA, api_name="/model_pick")
    assert choices["value"] == GEMMA and status.startswith(f"**This tab uses {GEMMA}** from now on")
    _, history, _, stats, _ = tab.predict("今天天气很好，", temperature=0, max_new_tokens=6, api_name="/chat")
    assert "天气好，我喜欢" in str(history[-1]["content"]) and NO_TEMPLATE_NOTE in stats
    result, table = tab.predict(600, api_name="/kv_measure")
    assert "equal to the byte" in result and len(table["data"]) == 18  # Gemma's 18 layers
    tab.predict(prompt="The capital of France is", chat=False, api_name="/step_start")
    ledger = tab.predict(api_name="/step_greedy")[6]["data"]
    assert ledger[0][1] == "␣the"  # Gemma's greedy token (SmolLM2's is ␣Paris)
    _, history, _, stats, _ = other.predict(QUESTION, temperature=0, max_new_tokens=8, api_name="/chat")
    assert NO_TEMPLATE_NOTE not in stats and "Paris" in str(history[-1]["content"])  # still SmolLM2
    assert tab.predict(SMOL, api_name="/model_pick")[1].startswith(f"**This tab uses {SMOL}**")


def test_an_unknown_model_is_refused_in_the_tabs_language_and_the_tab_keeps_its_model(app):
    zh = Client(app.url, verbose=False, headers={"Accept-Language": "zh-CN"})
    with pytest.raises(AppError, match="未知的模型 'no-such-model'"):
        zh.predict("no-such-model", api_name="/model_pick")
    _, _, _, stats, _ = zh.predict(QUESTION, temperature=0, max_new_tokens=3, api_name="/chat")
    assert NO_TEMPLATE_NOTE not in stats  # still SmolLM2


# --- bad input on one side: the other side keeps answering -----------------------------------------------


def test_an_unknown_side_says_why_and_the_other_side_answers(app):
    zh = Client(app.url, verbose=False, headers={"Accept-Language": "zh-CN"})
    shown = compare_chat(zh, **sides(SMOL, "no-such-model"))
    assert shown["status_b"].startswith("**未加载：** 未知的模型 'no-such-model'")
    assert shown["b_stats"].startswith("**已停止：** 未知的模型") and shown["b"] == ""
    assert shown["text_a"] == solo(app.engines[SMOL], 8).text


def test_a_side_that_wont_fit_is_refused_with_the_numbers(app, client):
    FREE["bytes"] = GB // 2
    try:
        shown = compare_chat(client, **sides(SMOL, GEMMA, quantize_b="int8"))
    finally:
        FREE["bytes"] = None
    assert shown["status_b"].startswith(f"**Not loaded:** Cannot load {GEMMA}@int8: it needs about ")
    assert "and 0.50 GB is free here. Unloading would not help" in shown["status_b"]
    assert (
        f"{GEMMA}: in use by 1" in shown["status_b"] and f"{SMOL}: the app’s own model" in shown["status_b"]
    )
    assert shown["text_a"] == solo(app.engines[SMOL], 8).text
    assert sorted(app.registry.loaded()) == [GEMMA, SMOL]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_is_down_is_not_connected_and_says_why(app, client):
    url = f"http://127.0.0.1:{_closed_port()}"
    status, *_ = client.predict("llama.cpp", url, "", api_name="/compare_connect")
    assert status.startswith(f"**Not connected:** Cannot reach the llama.cpp server at {url}/health")
    assert "Is it running?" in status
    assert sorted(app.registry.loaded()) == [GEMMA, SMOL]


@pytest.mark.skipif(llama_server_binary() is None, reason=why_no_binary())
def test_a_remote_side_that_goes_down_says_why_and_the_other_side_answers(app, client):
    try:
        with LlamaServer.start() as server:
            status, *_ = client.predict("llama.cpp", server.url, "served", api_name="/compare_connect")
            assert status.startswith("Connected **served**")
            served = compare_chat(client, max_new=4, **sides(SMOL, "served"))
            assert served["text_b"] and "stopped:" in served["b_stats"]  # it answered while it ran
        shown = compare_chat(client, **sides(SMOL, "served"))
        step = client.predict(
            step_prefix="The capital of France is",
            step_chat=False,
            step_k=3,
            **sides(SMOL, "served"),
            api_name="/compare_step",
        )
        tokens = client.predict(
            tokens_text="今天天气很好", **sides(SMOL, "served"), api_name="/compare_tokens"
        )
    finally:
        app.registry.unload("served")
    stopped = r"\*\*Stopped:\*\* (Cannot reach|The connection to) the llama.cpp server at"
    assert re.match(stopped, shown["b_stats"])
    assert shown["text_a"] == solo(app.engines[SMOL], 8).text
    # Step and Tokens too: the side that is down says why, the other side shows its own result
    assert step[1]["data"][0][1] == "␣Paris" and step[4]["data"] == []
    assert re.match(r"(Cannot reach|The connection to) the llama.cpp server at", step[5])
    assert tokens[2] and tokens[3].startswith("**13 tokens** for 6 characters")


def test_tokenizers_that_cannot_be_aligned_keep_their_scores(app, client, embedded_lm, tmp_path):
    """A third model whose tokenizer drops the spaces (a whitespace pre-tokenizer, as BERT's): its
    tokens have no place for every character, so no span can be cut; each model's scores stay."""
    make_tiny_llama(embedded_lm.tokenizer).model.save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(embedded_lm.tokenizer.name_or_path)
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save_pretrained(tmp_path)
    try:
        values = client.predict(
            score_context="Say it",
            score_chat=False,
            score_a="hello world",
            score_b="",
            compare_system="",
            **sides(SMOL, str(tmp_path)),
            api_name="/compare_score",
        )
        _, a_view, a_summary, a_table = values[:4]
        assert "**Not aligned:** Cannot align the scores:" in a_summary
        assert "do not cover the text end to end" in a_summary and a_table["data"] == []
        assert IDS.findall(a_view) and f"Under **{SMOL}** (its own model): log p = " in a_summary
    finally:
        app.registry.unload(str(tmp_path))
