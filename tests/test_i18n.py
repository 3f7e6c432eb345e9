"""Languages (playground/ui/i18n): every key in every language, found in the code; t() and the
engine's Messages; the session's language; the KV tab, its plots and its errors in Chinese, as
plain functions and through gradio_client."""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import pickle
import re
import string
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

from playground.errors import PlaygroundError
from playground.kv.presets import PRESETS
from playground.messages import Message
from playground.ui import i18n as languages
from playground.ui import kv_tab
from playground.ui.common import friendly_errors
from playground.ui.i18n import ENGLISH, LANGUAGES, localize, session_lang, t
from playground.ui.links import make_query, read_query, warn_bad_link

ROOT = Path(__file__).resolve().parents[1]
CODE = sorted([*ROOT.joinpath("playground").rglob("*.py"), ROOT / "app.py"])
# Where a Message is made from variables: the machinery itself, not a text
MACHINERY = {ROOT / "playground" / "messages.py", ROOT / "playground" / "errors.py"}
MISTRAL = json.dumps(PRESETS["Mistral-7B-v0.1"].config)
ENGLISH_ONLY_FIELDS = {"article"}
NOT_KEYS = {"chat.completion", "chat.completion.chunk"}  # the OpenAI API's object names, not our keys
FILE_NAME = re.compile(
    r"\.(css|js|py|png|json|md)$"
)  # "app.css" is a file, not a key  # "a"/"an": English grammar another language may leave out


# --- finding the keys in the code ------------------------------------------------------------------


def _called(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _literals(node: ast.AST | None) -> list[str]:
    """The string(s) an argument can be: a literal, or either side of a conditional of literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    return []


def engine_messages() -> dict[str, str]:
    """{key: English template} of every Message(...) and PlaygroundError(..., key=...) in the code."""
    found: dict[str, str] = {}
    for path in CODE:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name, args = _called(node), node.args
            keyword = {k.arg: k.value for k in node.keywords}
            if name == "Message" and len(args) >= 2:
                pair = (_literals(args[0]), _literals(args[1]))
            elif name and (name.endswith("Error") or name in RAISERS) and "key" in keyword and args:
                pair = (_literals(keyword["key"]), _literals(args[0]))
            else:
                continue
            if path in MACHINERY and not (pair[0] and pair[1]):
                continue  # Message's own plumbing (errors.py wraps a key and template it is given)
            assert len(pair[0]) == len(pair[1]) == 1, (
                f"{path}:{node.lineno}: a key and template must be literals"
            )
            key, template = pair[0][0], pair[1][0]
            assert found.get(key, template) == template, f"{key!r} has two English texts"
            found[key] = template
    return found


def ui_keys() -> dict[str, set[str]]:
    """{"t": keys given to t(), "i18n": keys given to i18n(), "named": other key-like literals}."""
    namespaces = {key.split(".")[0] for key in [*ENGLISH, *engine_messages()]}
    key_like = re.compile(rf"(?:{'|'.join(namespaces)})\.[a-z0-9_]+(?:\.[a-z0-9_]+)*")

    def is_key(text: str) -> bool:
        return bool(key_like.fullmatch(text)) and not FILE_NAME.search(text) and text not in NOT_KEYS

    used: dict[str, set[str]] = {"t": set(), "i18n": set(), "named": set()}
    for path in CODE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and _called(node) in ("t", "i18n"):
                used[_called(node)].update(_literals(node.args[0] if node.args else None))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and is_key(node.value):
                used["named"].add(node.value)
    for path in ROOT.joinpath("static").glob("*.js"):
        used["named"].update(re.findall(r"[\"'](js\.[a-z0-9_.]+)[\"']", path.read_text()))
    return used


def fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_every_key_used_in_the_code_has_its_english():
    used, messages = ui_keys(), engine_messages()
    missing = sorted((used["t"] | used["i18n"] | used["named"]) - set(ENGLISH) - set(messages))
    assert not missing, f"keys used in the code with no English in playground/ui/i18n/en.py: {missing}"
    assert not set(ENGLISH) & set(messages), "a key is both in en.py and an engine Message"
    assert len(used["t"]) > 50 and len(used["i18n"]) > 30 and len(messages) > 80  # the scan finds them


# The errors the engine raises (playground/errors.py): a user meets them in the page's language, so each
# is raised with a key (or given a Message made where the text is). These stay in English, each for its
# reason: operator settings read at start, and programming invariants no user input can reach.
RAISERS = {"PlaygroundError", "EngineUnavailable", "Cancelled"}
UNKEYED_ALLOWED = {
    ("settings.py", "must be true or false"): "an environment setting, read by the operator at start",
    ("settings.py", "must be a number"): "an environment setting, read by the operator at start",
    ("settings.py", "must be a whole number"): "an environment setting, read by the operator at start",
    ("ui/common.py", "model concurrency must be at least 1"): "a launch setting (the operator's)",
    ("ui/state.py", "The tab bound must be at least 1 tab"): "a launch setting (the operator's)",
    ("engine/kv_store.py", "The KV store bound must be > 0 bytes"): "a launch setting (the operator's)",
    ("engine/batcher.py", "Batching needs token budgets"): "a launch setting (the operator's)",
    ("serving/load.py", "An arrival schedule needs a rate"): "the serving benchmark's load, from code",
    ("traces.py", "Unknown trace kind"): "new_trace: the code names the kind, never a user",
    ("compare.py", "A comparison has two sides"): "an invariant: the Compare tab always passes two sides",
    ("engine/probes.py", "A batch needs at least one prompt"): "an invariant of the lessons' code",
    ("engine/probes.py", "Prefill the batch before stepping it"): "an invariant of the lessons' code",
    # a Message made elsewhere and passed on (the scan sees a name or a call, not the Message)
    ("engine/kv_quant.py", "PlaygroundError(problem)"): "KVFormat.missing() returns a Message",
    ("engine/quantize.py", "PlaygroundError(problem)"): "WeightFormat.missing() returns a Message",
    ("engine/loading.py", "_explain_load_failure("): "returns a Message (models.error.load)",
    ("engine/sampling.py", "PlaygroundError(message)"): "each range check's Message (sampling.*)",
    ("engine/remote/connect.py", "_no_tokenizer("): "returns a Message (remote.error.no_tokenizer)",
    ("engine/remote/launcher.py", "why_no_binary()"): "returns a Message (remote.launcher.*)",
    ("engine/remote/engine.py", "why_not("): "Capabilities.why_not returns a Message",
    ("hood/common.py", "why_not("): "Capabilities.why_not returns a Message",
    ("hood/common.py", "PlaygroundError(reason)"): "the engine's own reason, a Message (remote/notes.py)",
    ("hood/quantization.py", "run.skipped"): "a skipped format's own error (its exc.message)",
    ("ui/links.py", "reading.problem"): "said by read_query with t(); read_link is the Python API's",
}


def unkeyed_raises(root: Path = ROOT) -> list[tuple[str, str]]:
    """(file under playground/, the call's source) of every PlaygroundError / EngineUnavailable /
    Cancelled made with a text but no key= and not given a Message(...)."""
    found = []
    for path in sorted(root.joinpath("playground").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and _called(node) in RAISERS and node.args):
                continue
            given = node.args[0]
            keyed = any(k.arg == "key" for k in node.keywords)
            if keyed or (isinstance(given, ast.Call) and _called(given) == "Message"):
                continue
            found.append((path.relative_to(root / "playground").as_posix(), ast.unparse(node)))
    return found


def test_every_error_a_user_can_meet_is_keyed():
    found = unkeyed_raises()
    allowed = [(f, text) for f, text in found if any(f == a and s in text for a, s in UNKEYED_ALLOWED)]
    unkeyed = sorted(set(found) - set(allowed))
    assert not unkeyed, "raise these with key= (and give zh.py their Chinese), or allow them here: " + str(
        unkeyed
    )
    stale = [
        entry for entry in UNKEYED_ALLOWED if not any(entry[0] == f and entry[1] in text for f, text in found)
    ]
    assert not stale, f"allowed raises that are no longer in the code: {stale}"


def test_a_remote_engine_fault_is_told_in_chinese():
    """connect() to a URL that is not http, and to a server that refuses (still loading): Chinese by
    the error's key, English as str(exc), the server's own words as they came."""
    import httpx

    from playground.engine.remote import connect
    from playground.errors import EngineUnavailable

    with pytest.raises(PlaygroundError) as bad_url:
        connect("ftp://gpu-box:8080", "llama.cpp")
    assert str(bad_url.value) == "Engine URL must start with http:// or https://, got 'ftp://gpu-box:8080'."
    assert (
        localize(bad_url.value.message, "zh")
        == "引擎 URL 必须以 http:// 或 https:// 开头，收到的是 'ftp://gpu-box:8080'。"
    )

    loading = httpx.MockTransport(
        lambda request: httpx.Response(503, json={"error": {"message": "Loading model"}})
    )
    with pytest.raises(EngineUnavailable) as refused:
        connect("http://gpu-box:8080", "llama.cpp", transport=loading)
    assert str(refused.value) == (
        "the llama.cpp server at http://gpu-box:8080/health refused the request (HTTP 503): Loading model"
    )
    assert localize(refused.value.message, "zh") == (
        "http://gpu-box:8080/health 上的 llama.cpp 服务器 拒绝了请求（HTTP 503）：Loading model"
    )


def test_every_language_has_every_key_and_no_other():
    wanted = set(ENGLISH) | set(engine_messages())
    for code, language in LANGUAGES.items():
        if code == "en":
            continue
        missing, stale = sorted(wanted - set(language.strings)), sorted(set(language.strings) - wanted)
        assert not missing, f"{code}.py lacks {missing}"
        assert not stale, f"{code}.py has keys nothing uses: {stale}"


def test_translations_use_the_same_fields_and_format():
    english = {**engine_messages(), **ENGLISH}
    for code, language in LANGUAGES.items():
        for key, text in language.strings.items():
            missing = fields(english[key]) - fields(text) - ENGLISH_ONLY_FIELDS
            extra = fields(text) - fields(english[key])
            assert not missing and not extra, f"{code}.py {key!r}: fields {missing or extra} differ"
            text.format(**dict.fromkeys(fields(english[key]), 1234))  # no stray brace or bad spec


def test_static_text_has_no_fields_for_the_browser():
    static = ui_keys()["i18n"]
    for code, language in LANGUAGES.items():
        braced = [
            key for key in static if "{" in language.strings.get(key, "") or "}" in language.strings[key]
        ]
        assert not braced, f"{code}.py: static text (i18n) can't take values: {braced}"


def test_each_language_names_itself_and_its_gradio_locale():
    assert next(iter(LANGUAGES)) == "en" and {"en", "zh"} <= set(LANGUAGES)
    locales = [language.locale for language in LANGUAGES.values()]
    assert len(set(locales)) == len(locales) and LANGUAGES["zh"].locale == "zh-CN"
    assert LANGUAGES["zh"].name == "中文"
    assert set(languages.gradio_i18n().translations_dict) == set(locales)


def test_every_named_tab_of_every_row_gets_its_name_in_the_language_asked_for():
    """Nested rows too (Gradio names a tab not drawn yet once, in the browser's first language)."""
    keys = ["tab.hood", "hood.group.inside", "hood.attn.label"]
    with gr.Blocks() as demo, gr.Tabs(), gr.Tab(languages.i18n(keys[0]), id="hood"), gr.Tabs():
        with gr.Tab(languages.i18n(keys[1]), id="hood-group-inside"), gr.Tabs():
            gr.Tab(languages.i18n(keys[2]))
        gr.Tab("A name of no key", id="plain")
    tabs = languages.named_tabs(demo)
    assert list(tabs)[:2] == ["tab_hood", "tab_hood-group-inside"] and len(tabs) == 3
    names = languages.tab_names(tabs, "zh")
    assert [tab.label for tab in names.values()] == [LANGUAGES["zh"].strings[key] for key in keys]
    assert [tab.label for tab in languages.tab_names(tabs, "en").values()] == [ENGLISH[key] for key in keys]


# --- t(), Messages, the session's language ----------------------------------------------------------


def test_t_puts_values_into_the_language_asked_for():
    assert t("kv.sum.tokens", "en", tokens=131072) == "131,072 tokens"
    assert t("kv.sum.tokens", "zh", tokens=131072) == "131,072 个词元"
    assert t("kv.plot.gpu", "zh", gib=74.505) == "GPU：74.5 GiB"
    assert t("kv.plot.hover", "en") == "%{x:,} tokens: %{y:.3f} GiB"  # doubled braces: plotly's own
    assert t("tab.kv", "fr") == "KV cache"  # a language there is no table for: English


def with_zh(monkeypatch, strings: dict[str, str]) -> None:
    monkeypatch.setitem(LANGUAGES, "zh", dataclasses.replace(LANGUAGES["zh"], strings=strings))


def test_t_falls_back_to_english_then_to_the_key(monkeypatch, caplog):
    with_zh(monkeypatch, {k: v for k, v in LANGUAGES["zh"].strings.items() if k != "tab.kv"})
    assert t("tab.kv", "zh") == "KV cache"
    assert t("kv.no_such_key", "zh", n=1) == "kv.no_such_key"
    assert "kv.no_such_key" in caplog.text
    with pytest.raises(KeyError):
        t("kv.sum.tokens", "en")  # the English itself needs its value: a bug where t() is called


def test_a_translation_that_does_not_fit_its_values_says_the_english(monkeypatch):
    with_zh(monkeypatch, {**LANGUAGES["zh"].strings, "kv.sum.tokens": "{tokenz} 个词元"})
    assert t("kv.sum.tokens", "zh", tokens=5) == "5 tokens"


def test_messages_are_english_text_that_knows_its_key():
    kind = Message("kv.kind.sliding", "sliding")
    line = Message("kv.formula.tokens", "{tokens:,} tokens", tokens=4096)
    listed = Message("kv.source.kinds", "{kinds}", kinds=[kind, Message("kv.kind.full", "full")])
    assert line == "4,096 tokens" and listed == "sliding; full" and {"sliding": 1}[kind] == 1
    assert localize(line, "zh") == "4,096 个词元" and localize(listed, "zh") == "滑动窗口; 全注意力"
    assert localize("plain text", "zh") == "plain text"
    for copied in (copy.deepcopy(listed), pickle.loads(pickle.dumps(listed))):
        assert (
            type(copied) is Message
            and copied.key == "kv.source.kinds"
            and localize(copied, "zh") == "滑动窗口; 全注意力"
        )


def test_errors_carry_their_message_key_and_values():
    exc = PlaygroundError("Unknown preset {name!r}: pick one from the list.", key="kv.error.preset", name="x")
    assert str(exc) == "Unknown preset 'x': pick one from the list." and exc.message.key == "kv.error.preset"
    assert localize(exc.message, "zh") == "未知的预设 'x'：请从列表中选择。"
    plain = PlaygroundError("no key")
    assert plain.message == "no key" and localize(plain.message, "zh") == "no key"


def request(lang: str | None = None, accept: str | None = None) -> SimpleNamespace:
    """What a handler's gr.Request holds of the page: its query and headers."""
    return SimpleNamespace(
        query_params={"lang": lang} if lang else {}, headers={"accept-language": accept} if accept else {}
    )


@pytest.mark.parametrize(
    ("lang", "accept", "expected"),
    [
        (None, None, "en"),
        (None, "zh-CN,zh;q=0.9,en;q=0.8", "zh"),
        (None, "fr-FR,fr;q=0.9,zh-TW;q=0.8,en;q=0.5", "zh"),  # the first language we have
        (None, "en;q=0.4,zh;q=0.9", "zh"),  # by preference, not by position
        (None, "fr, de", "en"),
        ("en", "zh-CN", "en"),  # ?lang= wins (the header's switch writes it)
        ("zh", "en-US", "zh"),
        ("ZH_cn", None, "zh"),
        ("klingon", "zh-CN", "zh"),  # a language we don't have: the browser decides
    ],
)
def test_the_session_language_comes_from_the_page_then_the_browser(lang, accept, expected):
    assert session_lang(request(lang, accept)) == expected
    assert session_lang(None) == "en"  # called outside an event (tests, scripts)


def test_handlers_errors_reach_the_user_in_the_session_language():
    def calculate(seq: int) -> int:
        raise PlaygroundError(
            "{name} must be a positive whole number, got {value!r}.",
            key="kv.error.not_positive",
            name=Message("kv.name.seq_len", "Sequence length"),
            value=seq,
        )

    wrapped = friendly_errors(calculate)
    assert list(wrapped.__signature__.parameters) == ["seq", "request"]  # Gradio fills the request
    with pytest.raises(gr.Error, match="序列长度 必须是正整数，收到的是 0。"):
        wrapped(0, request(accept="zh-CN"))
    with pytest.raises(gr.Error, match=r"Sequence length must be a positive whole number, got 0\."):
        wrapped(0)


def test_links_keep_the_language_and_ignore_it_as_a_setting():
    query = make_query("kv", {"preset": "Llama-3.1-8B", "seq_len": 200000}, lang="zh")
    assert query == "tab=kv&preset=Llama-3.1-8B&seq=200000&lang=zh"
    reading = read_query({"tab": "kv", "seq": "100", "lang": "zh"})
    assert reading.problem == "" and reading.link.values == {"seq_len": 100}
    problem = read_query({"tab": "beam", "beams": "100"}, "zh").problem
    assert problem == "此链接的 beams='100' 不被接受：beams 必须是一个整数，范围 1 到 16。"


def test_a_bad_link_or_language_is_told_in_the_page_language():
    with pytest.warns(UserWarning, match=r"lang='klingon' is not a language of this page: use one of en"):
        assert warn_bad_link(request("klingon")) is None
    page = SimpleNamespace(query_params={"tab": "kv", "gpu": "lots", "lang": "zh"}, headers={})
    with pytest.warns(UserWarning) as told:
        assert warn_bad_link(page) == "kv"
    assert str(told[0].message).endswith("已按默认设置打开「KV 缓存」。") and "gpu='lots'" in str(
        told[0].message
    )


# --- the KV tab in Chinese ----------------------------------------------------------------------------


def kv_inputs(config: str = MISTRAL, seq: object = 8192, gpu: object = 80) -> tuple:
    return ("Mistral-7B-v0.1", config, seq, 2, "float16", "ideal", gpu, "bfloat16", None, 10)


def test_the_calculator_speaks_the_session_language():
    shown = kv_tab.KVHandlers(None).kv_calculate(*kv_inputs(), request=request("zh"))
    summary, formula = shown["summary"], shown["formula"]
    assert summary.startswith("### KV 缓存：**1,073,741,824 字节**") and "8,192 个词元 × 批大小 2" in summary
    assert "Mistral-7B-v0.1 公布的参数量" in summary and "任意长度" in summary
    assert "2（K 和 V）× 32 个滑动窗口层 × 8 个 KV 头 × 128 head_dim × 2 B（float16）" in formula
    assert "4,096 个词元（窗口）" in formula and "- 层的类型 = **32 × 滑动窗口（窗口 4096）**" in formula
    assert shown["layers"][0][1] == "滑动窗口"
    curves, bars = shown["curves"].to_dict()["layout"], shown["bars"].to_dict()
    assert curves["xaxis"]["title"]["text"] == "上下文长度（词元）" and "你的长度" in str(
        curves["annotations"]
    )
    assert [trace["name"] for trace in bars["data"]] == ["权重", "KV 缓存", "预留开销"]
    english = kv_tab.KVHandlers(None).kv_calculate(*kv_inputs(), request=request("en"))
    assert english["summary"].startswith("### KV cache: **1,073,741,824 bytes**")


def test_a_kv_error_is_told_in_chinese_in_the_summary_and_a_toast():
    with pytest.warns(UserWarning, match="GPU 显存 必须是以 GB 计的正数"):  # gr.Warning outside an event
        shown = kv_tab.KVHandlers(None).kv_calculate(*kv_inputs(gpu="lots"), request=request("zh"))
    said = "GPU 显存 必须是以 GB 计的正数（例如 80、12.5 或 12.5 GB；也可以用 GiB 和 TB），收到的是 'lots'。"
    stale = t("kv.stale", "zh")  # the last good result stays, marked stale (issue 33, item 7)
    assert shown["summary"] == f"**无法计算：** {said}\n\n<span class='kv-stale-note'>{stale}</span>"
    with pytest.warns(UserWarning, match="配置不是有效的 JSON"):
        shown = kv_tab.KVHandlers(None).kv_calculate(*kv_inputs(config="{oops"), request=request("zh"))
    assert shown["summary"].startswith("**无法计算：** 配置不是有效的 JSON：") and "curves" not in shown
    with pytest.warns(UserWarning, match="序列长度 必须是正整数"):
        kv_tab.KVHandlers(None).kv_calculate(*kv_inputs(seq=0), request=request("zh"))


def test_kv_texts_give_the_tables_headers_and_keep_measured_rows():
    texts = kv_tab.KVHandlers(SimpleNamespace(name="tiny", dtype=None)).kv_texts(
        "Mistral-7B-v0.1", {"headers": ["layer"], "data": [[0, "full", 5, 5, True]]}, None, request("zh")
    )
    assert texts["layers"].headers == ["层", "类型", "KV 头数", "K 维度", "V 维度", "保存的词元", "字节"]
    assert texts["measure_table"].value["data"] == [[0, "full", 5, 5, True]]
    assert texts["measure_table"].headers[2:] == ["预测字节", "实测字节", "相等"]
    assert "bfloat16：大多数检查点的发布格式" in texts["weights_dtype"].info
    assert texts["measure_intro"].startswith("用合成词元让 **tiny**")


def test_the_api_answers_in_the_language_the_client_accepts(launched_app):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    client = Client(launched_app, verbose=False, headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    summary, *_ = client.predict(*kv_inputs(config="{"), api_name="/kv_calculate")
    assert (
        summary.startswith("**无法计算：** 配置不是有效的 JSON") and "已标为过期" in summary
    )  # the last good: stale
    summary, *_ = client.predict(*kv_inputs(), api_name="/kv_calculate")
    assert summary.startswith("### KV 缓存：")
    with pytest.raises(AppError, match=r"请输入一个 config\.json 的路径"):  # a raised error (gr.Error)
        client.predict("", api_name="/kv_load_config")
    english = Client(launched_app, verbose=False)  # no Accept-Language: English
    with pytest.raises(AppError, match=r"Enter a path to a config\.json"):
        english.predict("", api_name="/kv_load_config")


def test_a_figure_recorded_in_english_shows_its_static_texts_in_the_language_asked_for():
    """The gallery's quantization ladder (docs/traces, recorded in English) on a Chinese page: its
    annotations, colour bar and legend in Chinese, its tick labels (the model's tokens) as recorded."""
    from playground.ui.i18n import localize_recorded

    recorded = json.loads(Path("docs/traces/hood-quant.json").read_text())
    [strip] = [f["figure"] for f in recorded["data"]["outputs"]["figures"] if f["name"] == "quant_strip"]
    shown = localize_recorded(strip, "zh")
    annotations = [a["text"] for a in shown["layout"]["annotations"]]
    assert annotations == [t("hood.quant.plot.text_side", "zh"), t("hood.quant.plot.continuation_side", "zh")]
    assert shown["data"][0]["colorbar"]["title"]["text"] == t("hood.quant.plot.kl_nats", "zh")
    assert shown["data"][1]["name"] == t("hood.quant.plot.flip", "zh")
    assert shown["layout"]["xaxis"]["ticktext"] == strip["layout"]["xaxis"]["ticktext"]
    assert localize_recorded(strip, "en") == strip


def test_a_lesson_replayed_on_a_chinese_page_titles_its_figures_in_chinese():
    """The replay app's lesson (docs/traces/hood-quant.json, recorded in English) in zh: the strip's
    colour bar and its label, drawn in the main slot, are in Chinese; in English as recorded."""
    from playground.traces import load_traces
    from playground.ui.hood.record import PLOT_SLOTS
    from playground.ui.replay import render_lesson_trace

    [trace] = load_traces(Path("docs/traces/hood-quant.json"))
    for lang in ("zh", "en"):
        main = render_lesson_trace(trace.data, lang)[PLOT_SLOTS[0]]
        strip = json.loads(main.value["plot"])["data"][0]
        assert strip["colorbar"]["title"]["text"] == t("hood.quant.plot.kl_nats", lang)
        assert main.label == t("hood.quant.plot.strip", lang)


def test_a_figures_english_text_means_one_thing_in_every_language():
    """A recorded figure's text is translated by its English (localize_recorded): two figure keys
    with the same English text must say the same in every language, or a replay could pick the
    wrong one."""
    from collections import defaultdict

    from playground.ui.i18n import is_plot_key

    keys_of: dict[str, list[str]] = defaultdict(list)
    for key, template in ENGLISH.items():
        if is_plot_key(key) and "{" not in template:
            keys_of[template].append(key)
    for language in LANGUAGES.values():
        for text, keys in keys_of.items():
            said = {language.strings.get(key, ENGLISH[key]) for key in keys}
            assert len(said) == 1, (language.code, text, keys, said)
