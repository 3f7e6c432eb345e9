"""Chat, Step by step and Beam search in English and 中文, as plain handlers on the real embedded models:
the Chinese presets (the chain rule's 今天天气很好 and a question) run and say, on SmolLM2, that it
writes Chinese as byte tokens, while Gemma 3 270M reads them as words; every view (status lines,
ledger, token cards, byte marks, charts, the beam tree) and every error of the area is said in the
page's language; English reads as before."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest

from playground.engine.sampling import SamplingSettings, validate_settings
from playground.errors import PlaygroundError
from playground.ui.beam_tab import BeamHandlers
from playground.ui.chat_controls import ChatControls
from playground.ui.chat_tab import ChatHandlers
from playground.ui.i18n import LANGUAGES, localize, t
from playground.ui.presets import CHAIN_RULE_TEXT, CHINESE_QUESTION, PRESETS, chinese_note, preset
from playground.ui.step_tab import StepHandlers
from playground.ui.token_html import answer_tokens_html
from playground.workspace import Workspaces

ZH = LANGUAGES["zh"].strings
CJK = re.compile(r"[\u4e00-\u9fff]")


def request(lang: str, session: str = "tab") -> SimpleNamespace:
    """A page's request: its tab and ?lang= (no Accept-Language)."""
    return SimpleNamespace(session_hash=session, query_params={"lang": lang}, headers={})


def said_in(lang: str, exc: pytest.ExceptionInfo) -> str:
    return localize(exc.value.message, lang)


# --- the presets -------------------------------------------------------------------------------------


def test_each_tab_has_a_chinese_question_and_step_has_the_chain_rule():
    for tab in ("chat", "step", "beam"):
        assert CHINESE_QUESTION in [p.text for p in PRESETS[tab]], tab
        assert any(p.text and not CJK.search(p.text) for p in PRESETS[tab]), tab  # the English one stays
    chain = preset("step", "chain_rule")
    assert (chain.text, chain.force) == ("", CHAIN_RULE_TEXT) and CHAIN_RULE_TEXT == "今天天气很好"
    assert t(chain.label, "zh") == "今天天气很好 · 链式法则"


def test_smollm2_writes_chinese_as_byte_tokens_and_says_so(embedded_lm):
    note = chinese_note(embedded_lm, CHAIN_RULE_TEXT)
    assert note is not None and note.params["tokens"] == 13 and 0 < note.params["pieces"] <= 13
    zh, en = localize(note, "zh"), localize(note, "en")
    assert "把中文写成字节词元" in zh and "13 个词元" in zh and "gemma-3-270m" in zh
    assert en.startswith("SmolLM2-135M-Instruct writes Chinese as byte tokens: this text is 13 tokens here")
    assert chinese_note(embedded_lm, "The capital of France is") is None  # no Chinese, nothing to say


def test_gemma_reads_chinese_as_words_so_nothing_is_said(gemma_lm):
    assert chinese_note(gemma_lm, CHAIN_RULE_TEXT) is None
    assert chinese_note(gemma_lm, CHINESE_QUESTION) is None


# --- Step by step ------------------------------------------------------------------------------------


def chain_rule(engine, lang: str) -> dict:
    return StepHandlers(engine, Workspaces(engine)).step_preset("chain_rule", request(lang))


def test_the_chain_rule_preset_is_a_ledger_of_forced_tokens_in_chinese(embedded_lm):
    view = chain_rule(embedded_lm, "zh")
    ledger = view["ledger"]
    assert ledger["headers"][:5] == ["步", "词元", "方式", "概率", "对数概率"]
    assert len(ledger["data"]) == 13 and {row[2] for row in ledger["data"]} == {"强制"}
    assert "字节" in ledger["data"][0][1]  # a byte token names its character's byte
    # the chain rule: log P(text) is the sum of the steps' log-probs
    total = sum(row[4] for row in ledger["data"])
    assert ledger["data"][-1][7] == pytest.approx(total, abs=1e-3)
    status = view["status"]
    assert status.startswith("已生成 13 个词元 · log P = ") and "上下文" in status
    assert "把中文写成字节词元" in status  # the byte-token note, on SmolLM2
    assert "词元概率" in view["text"] and "字节" in view["text"]  # legend and byte marks in Chinese
    chart = view["chart"].to_dict()
    assert chart["layout"]["xaxis"]["title"]["text"] == "概率" and chart["data"][0]["name"] == "原始（模型）"
    curve = view["curve"].to_dict()
    assert [trace["name"] for trace in curve["data"]] == ["这一步的对数概率", "累计对数概率"]
    assert curve["layout"]["yaxis"]["title"]["text"] == "纳特"


def test_the_chain_rule_preset_on_gemma_is_three_words(gemma_lm):
    view = chain_rule(gemma_lm, "zh")
    assert [row[1] for row in view["ledger"]["data"]] == ["今天", "天气", "很好"]
    assert "字节词元" not in view["status"]
    english = chain_rule(gemma_lm, "en")
    assert english["status"].startswith("3 generated tokens · log P = ")
    same_numbers = [[*row[:2], "force", *row[3:]] for row in view["ledger"]["data"]]
    assert english["ledger"]["data"] == same_numbers  # how each token was chosen, said in English


def test_step_views_read_as_before_in_english(embedded_lm):
    h = StepHandlers(embedded_lm, Workspaces(embedded_lm))
    view = h.step_start("The capital of France is", False, request("en"))
    assert view["status"] == "Prompt: 5 tokens · context 5/8,192"
    assert view["ledger"]["headers"][-3:] == ["cum log-prob", "perplexity", "after sampling"]
    after = h.step_greedy(request("en"))
    assert after["status"].startswith("1 generated token · log P = ")
    assert after["cand_1"]["value"].startswith("[1] ") and "after sampling" in after["cand_1"]["value"]


def test_step_errors_are_said_in_chinese(embedded_lm):
    h = StepHandlers(embedded_lm, Workspaces(embedded_lm))
    with pytest.raises(PlaygroundError) as exc:
        h.step_greedy(request("zh", "fresh"))
    assert said_in("zh", exc) == "还没有逐词元生成的会话：请先按“开始”。"
    h.step_start("Hello", False, request("zh"))
    with pytest.raises(PlaygroundError) as exc:
        h.step_pick_rank(0, request("zh"))
    assert said_in("zh", exc) == "排名必须不小于 1（1 = 最可能的词元），收到的是 0。"
    with pytest.raises(PlaygroundError) as exc:
        h.step_run("many", None, request("zh"), progress=lambda *a, **k: None)
    assert said_in("zh", exc) == "步数 必须是数字，收到的是 'many'"
    with pytest.raises(PlaygroundError) as exc:
        h.step_force("", request("zh"))
    assert said_in("zh", exc) == "要强制的文本是空的：请输入要追加的文本。"
    assert str(exc.value) == "The text to force is empty: type the text to append."  # English stays


# --- Chat ----------------------------------------------------------------------------------------------


def test_the_chat_preset_puts_the_question_in_the_box_and_says_the_bytes(embedded_lm):
    h = ChatHandlers(embedded_lm, SimpleNamespace(max_new_tokens_limit=64), Workspaces(embedded_lm))
    zh = h.chat_preset("capital_zh", request("zh"))
    assert zh["message"] == CHINESE_QUESTION and "把中文写成字节词元" in zh["status"]
    english = h.chat_preset("capital", request("en"))
    assert english == {"message": "What is the capital of France?"}  # nothing to say about bytes


def test_a_chinese_question_is_answered_with_chinese_statistics_and_the_byte_note(embedded_lm):
    h = ChatHandlers(embedded_lm, SimpleNamespace(max_new_tokens_limit=64), Workspaces(embedded_lm))
    updates = list(h.chat(CHINESE_QUESTION, [], ChatControls(max_new_tokens=4), request("zh")))
    assert updates[0]["status"] == "等待模型…"
    last = updates[-1]
    assert last["status"].startswith("提示词 ") and "预填充（首词元时间）" in last["status"]
    assert "把中文写成字节词元" in last["status"] and "词元概率" in last["token_view"]
    assert "停止原因：达到最多新词元数" in last["status"]


def test_a_chinese_answer_card_names_each_byte_in_chinese(embedded_lm):
    h = StepHandlers(embedded_lm, Workspaces(embedded_lm))
    h.step_preset("chain_rule", request("zh"))
    records = h.workspaces.get("tab").step.records
    cards = answer_tokens_html(records, lang="zh")
    assert "今 的第 1–2 个字节（共 3 个）" in cards and "今 的第 3 个字节（共 3 个）" in cards
    assert "今 = 2 个字节词元" in cards and "对数概率" in cards and "从这里逐词元生成" in cards
    english = answer_tokens_html(records)
    assert "bytes 1–2 of 3 of 今" in english and "byte 3 of 3 of 今" in english and "log-prob" in english


def test_chat_errors_are_said_in_chinese(embedded_lm):
    h = ChatHandlers(embedded_lm, SimpleNamespace(max_new_tokens_limit=64), Workspaces(embedded_lm))
    with pytest.raises(PlaygroundError) as exc:
        next(h.chat("  ", [], ChatControls(), request("zh")))
    assert said_in("zh", exc) == "消息是空的：请输入要发送的内容。"
    with pytest.raises(PlaygroundError) as exc:
        next(h.chat("Hi", [], ChatControls(seed="soon"), request("zh")))
    assert said_in("zh", exc) == "随机种子必须是整数（留空表示随机），收到的是 'soon'"
    with pytest.raises(PlaygroundError) as exc:
        validate_settings(SamplingSettings(temperature=-1.0))
    assert said_in("zh", exc) == "温度必须 >= 0（0 = 贪心），收到的是 -1.0"


# --- Beam search ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def beam_zh(embedded_lm):
    h = BeamHandlers(embedded_lm, Workspaces(embedded_lm))
    views = h.beam_run(
        CHINESE_QUESTION, False, 2, 3, 1.0, "off", 1, True, "png", request("zh"), lambda *a, **k: None
    )
    return h, views


def test_a_beam_search_on_the_chinese_question_reads_chinese(beam_zh):
    views = beam_zh[1]
    assert views["status"].startswith("**3 步**，停止原因：达到长度上限 · ")
    assert "**最好的束**" in views["status"] and "把中文写成字节词元" in views["status"]
    assert views["table"]["headers"] == ["排名", "得分", "累计对数概率", "词元数", "文本"]
    assert all(CJK.search(label) for label, _ in views["node"].choices[:3])
    plot = views["plot"].plot
    assert "束搜索：束宽 2，3 步" in plot and "对数概率" in plot and "返回的假设" in plot


def test_the_beam_tree_follows_a_language_switch(beam_zh):
    h, _ = beam_zh
    english = h.beam_texts(1, True, "png", request("en"))  # the same tab, switched to English
    assert english["status"].startswith("**3 steps**, stopped: length limit reached · ")
    assert english["table"].headers == ["rank", "score", "cum log-prob", "tokens", "text"]
    assert "Beam search: 2 beams, 3 steps" in english["plot"].plot


def test_beam_errors_are_said_in_chinese(embedded_lm):
    h = BeamHandlers(embedded_lm, Workspaces(embedded_lm))
    run = (False, 2, 3, 1.0, "off", 1, True, "png", request("zh"), lambda *a, **k: None)
    with pytest.raises(PlaygroundError) as exc:
        h.beam_run("", *run)
    assert said_in("zh", exc) == "提示词是空的：请输入要续写的文本。"
    with pytest.raises(PlaygroundError) as exc:
        h.beam_run("Hi", False, 99, *run[2:])
    assert said_in("zh", exc) == "束宽 必须是 1 到 16 之间的整数，收到的是 99。"
    with pytest.raises(PlaygroundError) as exc:
        h.beam_select_node(1, request("zh", "empty"))
    assert said_in("zh", exc) == "请先运行一次搜索：还没有可选的节点。"


def test_the_header_lines_the_engine_builds_are_said_in_chinese(embedded_lm):
    from playground.ui.app import header_markdown

    zh, en = header_markdown(embedded_lm, "zh"), header_markdown(embedded_lm, "en")
    assert "解码：" in zh and "Decode:" not in zh and "Decode:" in en
    assert math.isfinite(embedded_lm.load_seconds)
