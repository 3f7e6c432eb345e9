"""Under the hood in English and 中文 (playground/ui/i18n): every lesson's static text in both
languages, its explanation in the terms of the texts the playground teaches from, the numbers its
static text states equal to the code's limits; a lesson run, its figures, errors, trace and tables in
the session's language; the replay app's header, picker and lesson titles in the page's language."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from hood_tab_helpers import Hood

from playground.beam.search import LENGTH_LIMIT
from playground.beam.tree import BeamTree
from playground.engine import kv_quant
from playground.errors import PlaygroundError
from playground.hood import (
    LESSONS,
    attention,
    continuous_batching,
    jacobi,
    quantization,
    sampling_order,
    teacher_forcing,
    tokens,
)
from playground.messages import Message
from playground.step.export import session_from_json
from playground.traces import TRACE_FORMAT, load_gallery, load_traces
from playground.ui.hood import VIEWS
from playground.ui.hood.base import GROUPS
from playground.ui.hood.tab import texts_handler
from playground.ui.i18n import ENGLISH, LANGUAGES, localize, t
from playground.ui.replay import ReplayHandlers, header_markdown

ZH = LANGUAGES["zh"].strings
GALLERY = Path(__file__).resolve().parents[1] / "docs" / "traces"
CJK = re.compile(r"[\u4e00-\u9fff]")
# The terms of the two Chinese texts, each in the explanation of the lessons that show it (issue 31,
# item 3), with the English term the English explanation uses.
TERMS = {
    "tok": [("自回归", "autoregressive"), ("词元", "token")],
    "tf": [("链式法则", "chain rule"), ("教师强制", "teacher forcing"), ("暴露偏差", "exposure bias")],
    "order": [("贪心", "greedy"), ("束搜索", "beam search"), ("温度", "temperature"), ("Top-k", "top-k")],
    "attn": [("因果掩码", "causal mask")],
    "lens": [("自回归", "autoregressive")],
    "kv": [("KV 缓存", "KV cache")],
    "pd": [("预填充", "prefill"), ("解码", "decode")],
    "quant": [("量化", "quantization")],
    "spec": [("投机解码", "speculative decoding")],
    "jacobi": [("非自回归", "non-autoregressive"), ("自回归", "autoregressive")],
    "batch": [("批处理", "batching"), ("连续批处理", "continuous batching")],
    "cb": [("连续批处理", "continuous batching")],
}
# Static text (i18n, no values) that states a limit of the code, with that limit
NUMBERS = {
    "hood.tok.text.info": tokens.MAX_CHARS,
    "hood.tok.word.info": tokens.MAX_WORD_CHARS,
    "hood.tf.reference.info": teacher_forcing.MAX_TOKENS,
    "hood.order.n.info": sampling_order.MAX_DRAWS,
    "hood.attn.explain": attention.MAX_TOKENS,
    "hood.attn.text.info": attention.MAX_TOKENS,
    "hood.quant.text": quantization.MAX_TEXT_TOKENS,
    "hood.quant.formats.info": kv_quant.RESIDUAL_TOKENS,
    "hood.jacobi.n.info": jacobi.MAX_TOKENS,
    "hood.cb.requests.info": continuous_batching.MAX_REQUESTS,
}


def request(lang: str | None = None, session: str = "zh-tab") -> SimpleNamespace:
    """A page's request: its tab, ?lang= and no Accept-Language."""
    return SimpleNamespace(session_hash=session, query_params={"lang": lang} if lang else {}, headers={})


# --- static text -------------------------------------------------------------------------------------


@pytest.mark.parametrize("view", VIEWS, ids=lambda view: view.key)
def test_every_lesson_reads_in_both_languages(view):
    keys = [view.label, view.explain, view.run_label, view.action, GROUPS[view.group]]
    for key in keys:
        assert ENGLISH[key] and CJK.search(ZH[key]), key
    assert not CJK.search(ENGLISH[view.explain])
    assert localize(view.lesson.title, "zh") != str(view.lesson.title)  # the engine's title, translated
    assert CJK.search(localize(view.lesson.title, "zh"))


@pytest.mark.parametrize("view", VIEWS, ids=lambda view: view.key)
def test_each_explanation_says_what_the_texts_say_in_their_terms(view):
    english, chinese = ENGLISH[view.explain].lower(), ZH[view.explain]
    for zh_term, en_term in TERMS[view.key]:
        assert zh_term in chinese, (view.key, zh_term)
        assert en_term.lower() in english, (view.key, en_term)
    first = chinese.split("。")[0]  # on stage the explanation keeps two lines: the texts' term first
    assert any(zh_term in first for zh_term, _ in TERMS[view.key]), first


def test_all_the_terms_of_the_texts_are_taught():
    taught = " ".join(ZH[view.explain] for view in VIEWS)
    wanted = [
        "自回归",
        "链式法则",
        "因果掩码",
        "预填充",
        "解码",
        "KV 缓存",
        "贪心",
        "束搜索",
        "温度",
        "Top-k",
    ]
    wanted += ["Top-p", "暴露偏差", "教师强制", "投机解码", "连续批处理", "量化", "非自回归"]
    assert not [term for term in wanted if term not in taught]


@pytest.mark.parametrize(("key", "limit"), NUMBERS.items())
def test_static_text_states_the_limits_the_code_has(key, limit):
    for strings in (ENGLISH, ZH):
        assert re.search(rf"(?<![\d,]){limit:,}(?!\d|,\d)", strings[key]), (key, strings[key])


# --- a run in Chinese ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hood(embedded_lm):
    return Hood(embedded_lm)


def run(hood: Hood, key: str, *values: object, lang: str = "zh", session: str = "zh-tab") -> list[dict]:
    """A view's run as Gradio calls it, from a page in `lang`."""
    from playground.ui.hood.tab import run_handler

    return list(run_handler(hood.tab, hood.view(key))(*values, request(lang, session), None))


def texts_of(figure: object) -> list[str]:
    """Every text a reader sees on a figure: titles, axis titles, legend names, annotations, hovers."""
    layout = figure.to_dict()["layout"]
    found = [str(layout.get("title", {}).get("text") or "")]
    for name, axis in layout.items():
        if name.startswith(("xaxis", "yaxis")):
            found.append(str(axis.get("title", {}).get("text") or ""))
    found += [str(note.get("text") or "") for note in layout.get("annotations", [])]
    for trace in figure.to_dict()["data"]:
        found += [str(trace.get("name") or ""), str(trace.get("hovertemplate") or "")]
    return [text for text in found if text.strip()]


UNITS = re.compile(r"\b(ms|MiB|KiB|GB|KL|tok/s|FLOP|TTFT|TPOT|TV|head_dim|top-1|customdata|extra)\b")


def english_words(text: str) -> list[str]:
    """Words of three letters or more left in a Chinese text (units and plotly's fields aside)."""
    return re.findall(r"[A-Za-z]{3,}", UNITS.sub("", re.sub(r"%\{[^}]*\}", "", text)))


def test_a_lesson_runs_in_chinese_status_summary_figures_and_text(hood):
    updates = run(hood, "kv", 32, 3)
    assert updates[0] == {"kv_status": "运行中：缓存开 vs 关…"}
    assert updates[1]["kv_status"].startswith("运行中：词元 1/3 · 提示词 32 个词元")
    final = updates[-1]
    assert final["kv_status"].startswith("完成：词元 3/3")
    assert "**词元：完全相同 ✓**" in final["kv_summary"] and "与公式完全一致 ✓" in final["kv_summary"]
    assert "<b>有缓存：</b>" in final["kv_text"]
    for name in ("kv_latency", "kv_cumulative", "kv_bytes"):
        texts = texts_of(final[name])
        assert any(CJK.search(text) for text in texts), (name, texts)
        assert not [text for text in texts if english_words(text)], name
    english = run(hood, "kv", 32, 3, lang="en", session="en-tab")[-1]
    assert (
        english["kv_status"].startswith("Done: token 3/3") and "Tokens: identical ✓" in english["kv_summary"]
    )


def test_the_tokens_lesson_speaks_chinese_with_the_model_output_as_it_is(hood):
    final = run(
        hood,
        "tok",
        "unbelievable 我爱你",
        "unbelievable",
        "The weather is very nice today.",
        "今天天气很好。",
    )[-1]
    assert final["tok_status"].startswith("完成：") and "个词元" in final["tok_status"]
    summary = final["tok_summary"]
    assert "个字符切成" in summary and "同一句话用中文需要" in summary and "英文：" in summary
    english = ("tokens", "characters", "per token", "merges", "measured", "Chinese", "English", "sentence")
    assert not [word for word in english if word in summary], summary
    assert "的 BPE 合并过程" in final["tok_merges"] and "共 " in final["tok_merges"]
    assert "被切成字节词元的字符：" in final["tok_view"]
    x = final["tok_languages"].to_dict()["data"][0]["x"]
    assert x == ["英文", "中文"]


def test_a_bad_input_fails_in_chinese_on_the_status_line_and_as_the_error(hood):
    updates = []
    with pytest.raises(PlaygroundError) as raised:
        from playground.ui.hood.tab import run_handler

        for update in run_handler(hood.tab, hood.view("tok"))("", "", "a", "b", request("zh"), None):
            updates.append(update)
    assert updates[-1] == {"tok_status": "失败：文本是空的：请输入要分词的内容。"}
    assert localize(raised.value.message, "zh") == "文本是空的：请输入要分词的内容。"
    assert str(raised.value) == "The text is empty: type something to tokenize."  # English underneath


def test_engine_errors_of_the_lessons_are_said_in_chinese(embedded_lm):
    from playground.hood.common import whole_in_range

    with pytest.raises(PlaygroundError) as raised:
        jacobi.run(embedded_lm, [1, 2], 65)
    assert localize(raised.value.message, "zh") == "并行解码的词元数 必须是 1 到 64 之间的整数，收到的是 65。"
    with pytest.raises(PlaygroundError) as raised:
        quantization.run(embedded_lm, [], weights="hqq4")
    assert localize(raised.value.message, "zh") == "文本是空的：请输入一两句话。"
    with pytest.raises(PlaygroundError) as raised:
        whole_in_range(0, 1, 3, Message("hood.name.draws", "Draws (N)"))
    assert localize(raised.value.message, "zh").startswith("抽样次数（N） 必须是 1 到 3 之间的整数")


@pytest.fixture(scope="module")
def built(embedded_lm):
    """The tab as the app builds it (its figures' labels are known then)."""
    from playground.ui.hood import build_hood_tab
    from playground.ui.state import TabStates
    from playground.workspace import Workspaces

    with gr.Blocks():
        widgets, tab = build_hood_tab(embedded_lm, Workspaces(embedded_lm), TabStates(), VIEWS)
    return SimpleNamespace(tab=tab, widgets=widgets, view=lambda key: tab.views[key])


def test_a_trace_saved_from_a_chinese_page_keeps_its_language(built):
    run(built, "pd", [16], 2, session="zh-trace")
    data = json.loads(Path(built.tab.trace(built.view("pd"), request("zh", "zh-trace"))).read_text("utf-8"))
    assert data["title"].startswith("预填充 vs 解码：") and data["data"]["view"] == "pd"
    outputs = data["data"]["outputs"]
    assert outputs["tables"]["pd_table"]["headers"][:2] == ["提示词词元数", "预填充 ms"]
    assert {f["label"] for f in outputs["figures"]} == {"每秒词元数", "算术强度（每搬运一字节的 FLOP，估算）"}
    assert outputs["texts"]["pd_status"].startswith("完成：")


def test_the_tables_headers_follow_the_page_language_and_keep_their_rows(hood):
    handler = texts_handler(hood.tab)
    tables = list(hood.tab.tables)
    assert tables == ["pd_table", "quant_table", "spec_checks", "batch_table"]
    rows = [[16, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]]
    shown = handler(rows, None, None, None, request("zh"))
    assert shown["pd_table"].headers[:3] == ["提示词词元数", "预填充 ms", "预填充 tok/s"]
    assert shown["pd_table"].value["data"] == rows
    assert shown["spec_checks"].headers == ["轮次", "草稿词元", "p（模型）", "q（草稿）", "检验", "结果"]
    assert handler(None, None, None, None, request("en"))["batch_table"].headers[1] == "prompt"


# --- the replay app --------------------------------------------------------------------------------


def test_the_replay_app_speaks_the_page_language():
    traces = load_traces(GALLERY)
    handlers = ReplayHandlers(traces, ["broken.json is not a trace"])
    shown = handlers.replay_texts(request("zh"))
    assert shown["header"].startswith("## LLM 生成实验场 · 回放") and "已跳过 broken.json" in shown["header"]
    assert "条录制的记录" in shown["header"] and "未加载模型" in shown["header"]
    labels = [label for label, _ in shown["hood_trace"].choices]
    titles = {localize(lesson.title, "zh") for lesson in LESSONS}
    assert all(label.split(" · ")[0] in titles for label in labels), labels
    assert shown["tab_hood"].label == "原理剖析" and shown["tab_chat"].label == "对话"
    hood_view = handlers.replay_hood(0, request("zh"))
    assert "录制自" in hood_view["hood_source"] and "● 录制" in hood_view["hood_source"]
    assert any(hood_view["hood_status"].startswith(f"**{title}**") for title in titles)
    assert "下一个词元" in handlers.replay_step(0, None, request("zh"))["candidates"]
    with pytest.raises(PlaygroundError) as raised:
        handlers.pick("hood", 99)
    assert localize(raised.value.message, "zh") == "没有第 99 条录制的 hood 记录。"
    assert header_markdown(traces).startswith("## LLM generation playground · replay")  # English by default


def test_replayed_chat_step_and_beam_traces_are_drawn_in_the_page_language():
    """Chat, Step and Beam traces hold numbers: replayed on a Chinese page they read as the live tabs
    do in Chinese, the beam's recorded stop reason included; in English as before."""
    handlers = ReplayHandlers(load_traces(GALLERY))
    chat = handlers.replay_chat(0, request("zh"))
    assert (
        "提示词" in chat["status"]
        and "停止原因" in chat["status"]
        and "提示词" in chat["history"][-1]["content"]
    )
    step = handlers.replay_step(0, None, request("zh"))
    assert step["status"].startswith("已生成") and step["ledger"]["headers"][:2] == ["步", "词元"]
    beam = handlers.replay_beam(0, request("zh"))
    assert "停止原因：达到长度上限" in beam["status"] and beam["table"]["headers"][0] == "排名"
    english = handlers.replay_beam(0, request("en"))
    assert "stopped: length limit reached" in english["status"] and english["table"]["headers"][0] == "rank"
    assert handlers.replay_step(0, None, request("en"))["ledger"]["headers"][:2] == ["step", "token"]


def test_a_saved_beam_tree_says_its_stop_reason_in_any_language():
    """A search's stop reason (a Message) survives export and import with its key and values; a file
    saved before it was kept keeps its text."""
    [trace] = [trace for trace in load_traces(GALLERY) if trace.kind == "beam"]
    saved = {**trace.data, "stop_reason": "stopped by you at step 3 of 12"}
    saved["stop_message"] = {
        "key": "beam.stopped_by_you",
        "template": "stopped by you at step {step} of {steps}",
        "params": {"step": 3, "steps": 12},
    }
    reason = BeamTree.from_dict(saved).stop_reason
    assert localize(reason, "zh") == t("beam.stopped_by_you", "zh", step=3, steps=12)
    again = BeamTree.from_dict(json.loads(json.dumps(BeamTree.from_dict(saved).to_dict()))).stop_reason
    assert isinstance(again, Message) and (again.key, again.params) == (reason.key, reason.params)
    assert localize(again, "zh") == "由你在第 3 步（共 12 步）停止"
    older = {key: value for key, value in trace.data.items() if key != "stop_message"}
    assert not isinstance(BeamTree.from_dict(older).stop_reason, Message)
    assert BeamTree.from_dict(older).stop_reason == LENGTH_LIMIT


def test_a_trace_files_faults_are_told_in_the_page_language(tmp_path):
    """A trace file refused by Step's import, or skipped by --replay DIR, is named in the page's
    language (the file's name and Python's own reason stay as they are)."""
    newer = json.dumps({"format": TRACE_FORMAT, "version": 99})
    with pytest.raises(PlaygroundError) as raised:
        session_from_json(None, newer)
    assert localize(raised.value.message, "zh").startswith("此文件 由更新版本的实验场录制（记录版本 99；")
    assert str(raised.value).startswith("This file was recorded by a newer version")
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    (tmp_path / "good.json").write_text((GALLERY / "beam-4x12.json").read_text(encoding="utf-8"), "utf-8")
    traces, skipped = load_gallery(tmp_path)
    header = header_markdown(traces, skipped, "zh")
    assert f"已跳过 {tmp_path / 'broken.json'} 不是记录文件：不是有效的 JSON（" in header
    assert f"Skipped {tmp_path / 'broken.json'} is not a trace" in header_markdown(traces, skipped)


def test_every_gallery_trace_still_replays(tmp_path):
    for path in sorted(GALLERY.glob("hood-*.json")):
        [trace] = load_traces(path)
        views = ReplayHandlers([trace]).replay_hood(0, request("zh"))
        assert isinstance(views["hood_table"], gr.Dataframe)
        assert t("replay.badge", "zh") in views["hood_source"]
