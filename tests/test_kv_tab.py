"""KV-cache tab: handlers called as plain functions, then the tab through gradio_client on the whole app."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import gradio as gr
import pytest
import torch

from playground import kv as kvm
from playground.engine.local import LocalEngine
from playground.errors import PlaygroundError
from playground.kv.presets import PRESETS
from playground.ui import kv_tab, kv_text
from playground.ui.i18n import i18n
from tests.conftest import make_tiny_llama

MISTRAL = json.dumps(PRESETS["Mistral-7B-v0.1"].config)
# Mistral-7B: 32 layers × 8 KV heads × 128 head_dim × 2 (K, V) × 2 B = 131,072 B per token, window 4096.
MISTRAL_PER_TOKEN = 2 * 32 * 8 * 128 * 2


def calc(
    lm,
    preset="Mistral-7B-v0.1",
    text=MISTRAL,
    seq=8192,
    batch=2,
    kv="float16",
    mode="ideal",
    gpu=80,
    wdtype="bfloat16",
    params=None,
    overhead=10,
):
    out = kv_tab.calculate(lm, preset, text, seq, batch, kv, mode, gpu, wdtype, params, overhead)
    return tuple(out[name] for name in kv_tab.CALCULATOR_OUTPUTS)


def calculate_or_explain(lm, *inputs):
    """The calculator handler as the UI calls it, its named outputs in display order."""
    out = kv_tab.KVHandlers(lm).kv_calculate(*inputs)
    return tuple(out[name] for name in kv_tab.CALCULATOR_OUTPUTS)


def test_calculate_shows_both_units_formula_and_layers(embedded_lm):
    summary, formula, rows, _, _ = calc(embedded_lm)
    kv = MISTRAL_PER_TOKEN * 4096 * 2  # the window caps 8192 tokens at 4096, two sequences
    assert f"{kv:,} bytes" in summary
    assert f"{kv / 2**30:,.3f} GiB** (2^30 B)" in summary and f"{kv / 1e9:,.3f} GB** (10^9 B)" in summary
    assert "published count of Mistral-7B-v0.1" in summary
    assert "32 sliding layers × 8 KV heads × 128 head_dim" in formula and "4,096 tokens (window)" in formula
    assert "`text_config" not in formula and "num_key_value_heads" in formula
    assert len(rows) == 32 and rows[0][5] == "4,096" and rows[0][6] == f"{kv // 32:,}"  # separators
    assert "any length" in summary  # every layer is windowed


def test_curve_levels_off_and_bar_stacks(embedded_lm):
    _, _, _, curves, bars = calc(embedded_lm, seq=16384)
    mistral = next(t for t in curves.to_dict()["data"] if t["name"] == "Mistral-7B-v0.1 · float16")
    xs, ys = list(mistral["x"]), list(mistral["y"])
    plateau = [y for x, y in zip(xs, ys, strict=True) if x >= 4096]
    assert len(plateau) > 5 and max(plateau) == min(plateau) == MISTRAL_PER_TOKEN * 4096 * 2 / 2**30
    assert any(t["line"]["dash"] == "dash" for t in curves.to_dict()["data"])  # other dtypes
    layout = bars.to_dict()["layout"]
    assert layout["barmode"] == "stack"
    assert {t["name"] for t in bars.to_dict()["data"]} == {"weights", "KV cache", "overhead reserve"}


def test_loaded_model_uses_its_own_parameter_count(embedded_lm):
    text = kv_tab.preset_config_text(embedded_lm, kv_tab.LOADED)
    summary, _, rows, _, _ = calc(embedded_lm, kv_tab.LOADED, text, seq=100, batch=1, kv="float32")
    assert "counted on the loaded model" in summary
    assert f"{2 * 30 * 3 * 64 * 100 * 4:,} bytes" in summary and len(rows) == 30


def test_edited_preset_is_estimated(embedded_lm):
    edited = json.dumps({**PRESETS["Mistral-7B-v0.1"].config, "num_hidden_layers": 16})
    summary, *_ = calc(embedded_lm, text=edited)
    assert "estimated from the config" in summary


def test_bad_inputs_raise_clear_errors(embedded_lm):
    with pytest.raises(PlaygroundError, match="not valid JSON"):
        calc(embedded_lm, text="{oops")
    with pytest.raises(PlaygroundError, match="num_hidden_layers"):
        calc(embedded_lm, text='{"hidden_size": 64}')
    with pytest.raises(PlaygroundError, match="Sequence length"):
        calc(embedded_lm, seq=0)
    with pytest.raises(PlaygroundError, match="Unknown dtype"):
        calc(embedded_lm, kv="float12")
    for gpu in (-1, "lots", None, "12,5", "0 GB"):
        with pytest.raises(
            PlaygroundError, match=r"GPU memory must be a positive size in GB \(e.g. 80, 12.5"
        ):
            calc(embedded_lm, gpu=gpu)
    assert "On a 100 GB GPU" in calc(embedded_lm, gpu="100")[0]  # a typed custom size
    # typed as the presets read: a decimal, a unit, the preset's whole label; GiB and TB converted
    typed_sizes = [
        ("12.5 GB", "a 12.5 GB"),
        ("12.5", "a 12.5 GB"),
        ("80 GB · A100-80, H100", "an 80 GB"),
        ("24 GiB", "a 25.77 GB"),
        ("1.5 TB", "a 1,500 GB"),
    ]
    for typed, shown in typed_sizes:
        assert f"On {shown} GPU" in calc(embedded_lm, gpu=typed)[0], typed
    assert (
        "On an 80 GB GPU" in calc(embedded_lm, gpu=80)[0]
        and "On an 11 GB GPU" in calc(embedded_lm, gpu=11)[0]
    )
    assert [kv_text.article(n) for n in (8, 18, 24, 80, 110, 11000, 141)] == [
        "an",
        "an",
        "a",
        "an",
        "a",
        "an",
        "a",
    ]


def test_longest_context_stops_at_the_models_own_limit(embedded_lm):
    text = kv_tab.preset_config_text(embedded_lm, "SmolLM2-135M")
    summary, formula, *_ = calc(embedded_lm, "SmolLM2-135M", text, seq=4096, batch=1)
    # memory alone would hold millions of tokens of this 135 M model on 80 GB; the model stops at 8,192
    line = next(row for row in summary.splitlines() if row.startswith("- longest context"))
    assert line.startswith("- longest context at batch 1: **8,192 tokens**, the model's own limit"), line
    assert (
        "memory alone: " in line and int(line.split("memory alone: ")[1].split()[0].replace(",", "")) > 10**6
    )
    assert "context limit = **8192** ← `max_position_embeddings`" in formula
    assert "past this model's own context limit" not in summary
    summary, *_ = calc(embedded_lm, "SmolLM2-135M", text, seq=16384, batch=1)
    assert "⚠️ 16,384 tokens is past this model's own context limit of 8,192" in summary
    # a GPU too small for even the model's limit: memory's answer stands
    summary, *_ = calc(
        embedded_lm,
        "Llama-3.1-8B",
        kv_tab.preset_config_text(embedded_lm, "Llama-3.1-8B"),
        seq=4096,
        batch=1,
        gpu=24,
    )
    line = next(row for row in summary.splitlines() if row.startswith("- longest context"))
    assert "model's own limit" not in line and int(line.split("**")[1].split()[0].replace(",", "")) < 131072


def test_heads_must_be_a_multiple_of_the_kv_heads(embedded_lm):
    config = {**PRESETS["SmolLM2-135M"].config, "num_attention_heads": 4, "num_key_value_heads": 3}
    with pytest.raises(
        PlaygroundError, match=r"num_attention_heads \(4\) must be a multiple of the KV heads \(3\)"
    ):
        calc(embedded_lm, "SmolLM2-135M", json.dumps(config))
    config["num_key_value_heads"] = 2  # 2 query heads per KV head: fine
    assert "bytes" in calc(embedded_lm, "SmolLM2-135M", json.dumps(config))[0]


def test_bad_config_explains_and_keeps_the_last_good_result_marked_stale(embedded_lm):
    """A user error is told in the summary (and a toast) with the note that marks the last good result
    stale; the formula, figures and table are not touched (issue 33, item 7; the browser test sees them)."""
    inputs = ["Mistral-7B-v0.1", '{"num_hidden_layers": 2, ', 8192, 2, "float16", "ideal", 80, "bfloat16"]
    with pytest.warns(UserWarning, match="not valid JSON"):  # gr.Warning outside an event: a warning
        out = kv_tab.KVHandlers(embedded_lm).kv_calculate(*inputs, None, 10)
    assert list(out) == ["summary"]  # the other views keep the last good result
    assert out["summary"].startswith("**Can't calculate:** The config is not valid JSON")
    assert "class='kv-stale-note'" in out["summary"] and "bytes" not in out["summary"]
    zero_length = ["Mistral-7B-v0.1", MISTRAL, 0, 2, "float16", "ideal", 80, "bfloat16", None, 10]
    with pytest.warns(UserWarning, match="Sequence length"):
        summary = kv_tab.KVHandlers(embedded_lm).kv_calculate(*zero_length)["summary"]
    assert summary.startswith("**Can't calculate:** Sequence length must be a positive whole number")


def test_a_recalculation_nobody_asked_for_marks_the_summary_without_a_toast(embedded_lm, recwarn):
    """Another model or another language recalculates the tab (kv_recalculate): a refused value was
    told when it was typed; it is not toasted again over the tab the person is on."""
    minus_five = ["Mistral-7B-v0.1", MISTRAL, -5, 2, "float16", "ideal", 80, "bfloat16", None, 10]
    handlers = kv_tab.KVHandlers(embedded_lm)
    summary = handlers.kv_recalculate(*minus_five)["summary"]
    assert summary.startswith("**Can't calculate:** Sequence length must be a positive whole number")
    assert "class='kv-stale-note'" in summary
    assert [str(w.message) for w in recwarn if issubclass(w.category, UserWarning)] == []
    with pytest.warns(UserWarning, match="Sequence length"):  # the person's own calculation: told
        handlers.kv_calculate(*minus_five)


def test_the_page_load_calculates_quietly_and_a_links_values_are_calculated(embedded_lm, recwarn):
    """The page load's calculation (kv_from_link) reads the controls as shown: a value typed before
    the page settled is told once, by the typing's own event, not again by the load (a link's own bad
    value is told when the link is read: warn_bad_link). A link's values are calculated."""
    bad_gpu = ["Mistral-7B-v0.1", MISTRAL, 8192, 2, "float16", "ideal", "lots", "bfloat16", None, 10]
    handlers = kv_tab.KVHandlers(embedded_lm)
    plain = SimpleNamespace(session_hash="load", query_params={}, headers={})
    summary = handlers.kv_from_link(*bad_gpu, request=plain)["summary"]
    assert summary.startswith("**Can't calculate:** GPU memory must be a positive size in GB")
    assert [str(w.message) for w in recwarn if issubclass(w.category, UserWarning)] == []
    link = SimpleNamespace(session_hash="link", query_params={"tab": "kv", "gpu": "24"}, headers={})
    assert "On a 24 GB GPU" in handlers.kv_from_link(*bad_gpu, request=link)["summary"]


def test_unexpected_errors_still_raise(embedded_lm, monkeypatch):
    def broken(*_):
        raise RuntimeError("boom")

    monkeypatch.setattr(kv_tab, "calculate", broken)
    with pytest.raises(RuntimeError, match="boom"):
        calculate_or_explain(
            embedded_lm, "Mistral-7B-v0.1", MISTRAL, 8192, 2, "float16", "ideal", 80, "bfloat16", None, 10
        )


def test_preset_restores_the_loaded_models_config(embedded_lm):
    loaded = kv_tab.preset_config_text(embedded_lm, kv_tab.LOADED)
    assert json.loads(loaded) == kv_tab.loaded_config(embedded_lm)
    assert kv_tab.preset_config_text(embedded_lm, "Mistral-7B-v0.1") != loaded
    assert kv_tab.preset_config_text(embedded_lm, kv_tab.LOADED) == loaded  # chosen again: same text back


def test_preset_fires_on_every_selection(embedded_lm):
    with gr.Blocks() as demo:
        kv_tab.build_kv_tab(embedded_lm)
    deps = [d for d in demo.fns.values() if d.api_name == "kv_preset_config"]
    assert len(deps) == 1 and [t[1] for t in deps[0].targets] == ["select"]  # not "change"


def test_load_config_from_a_directory(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(MISTRAL)
    assert (
        json.loads(kv_tab.KVHandlers(None).kv_load_config(str(tmp_path))) == PRESETS["Mistral-7B-v0.1"].config
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PlaygroundError, match="offline"):
        kv_tab.KVHandlers(None).kv_load_config("someone/some-model")


def test_load_config_refuses_other_files(tmp_path):
    (tmp_path / "notes.json").write_text(MISTRAL)
    with pytest.raises(PlaygroundError, match=r"only a file named config\.json"):
        kv_tab.KVHandlers(None).kv_load_config(str(tmp_path / "notes.json"))
    (tmp_path / "config.json").write_text('{"auths": {"registry": {"auth": "c2VjcmV0"}}}')
    with pytest.raises(PlaygroundError, match="does not look like a model config") as info:
        kv_tab.KVHandlers(None).kv_load_config(str(tmp_path))
    assert "c2VjcmV0" not in str(info.value)


def test_weights_dtype_defaults_to_the_loaded_models_dtype(embedded_lm):
    value, info = kv_tab.weights_dtype_default(embedded_lm, kv_tab.LOADED)
    assert (
        value == "float32" == str(embedded_lm.dtype).removeprefix("torch.") and "As loaded: float32" in info
    )
    text = kv_tab.preset_config_text(embedded_lm, kv_tab.LOADED)
    summary, *_ = calc(embedded_lm, kv_tab.LOADED, text, seq=100, batch=1, wdtype=value)
    weights = embedded_lm.num_parameters * 4  # float32: the bytes the model really takes here
    assert f"in float32 = {kvm.format_bytes(weights)}" in summary
    other = kv_tab.weights_dtype_update(embedded_lm, "Mistral-7B-v0.1")
    assert other.value == "bfloat16" and "As loaded" not in other.info
    again = kv_tab.weights_dtype_update(embedded_lm, kv_tab.LOADED)  # re-selecting the loaded model
    assert again.value == "float32" and "As loaded: float32" in again.info


def test_first_paint_uses_the_loaded_dtype(embedded_lm):
    with gr.Blocks() as demo:
        kv_tab.build_kv_tab(embedded_lm)
    label = str(i18n("kv.weights_dtype"))  # a static label: its key, translated in the browser
    dropdowns = [b for b in demo.blocks.values() if str(getattr(b, "label", None)) == label]
    assert len(dropdowns) == 1 and dropdowns[0].value == "float32"
    summary = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "kv-summary")
    assert "in float32 = " in summary.value
    assert "runs in **float32**" in str([getattr(b, "value", "") for b in demo.blocks.values()])


def test_measure_bfloat16_model_uses_its_dtype(embedded_lm):
    tiny = make_tiny_llama(embedded_lm.tokenizer)
    lm = LocalEngine(
        tiny.model.to(torch.bfloat16), tiny.tokenizer, tiny.device, torch.bfloat16, "tiny", 0, "local"
    )
    text, rows = kv_tab.measure(lm, 10)
    assert f"Measured {2 * 2 * 2 * 16 * 10 * 2:,} bytes" in text and "equal to the byte" in text
    assert "loaded in bfloat16" in text and "'bfloat16', 'transformers'" in text
    assert all(row[4] for row in rows) and len(rows) == 2


def test_handler_is_fast(embedded_lm):
    calc(embedded_lm)  # warm up
    started = time.perf_counter()
    for seq in (1000, 5000, 30000):
        calc(embedded_lm, seq=seq)
    assert (time.perf_counter() - started) / 3 < 0.25  # engine + three plotly figures


def test_tab_through_gradio_client(app_client):
    text = app_client.predict("Gemma-3-27B", api_name="/kv_preset_config")
    assert json.loads(text)["text_config"]["sliding_window"] == 1024
    summary, formula, rows, _, _ = app_client.predict(
        "Gemma-3-27B", text, 32768, 1, "float16", "ideal", 80, "bfloat16", None, 10, api_name="/kv_calculate"
    )
    per_layer_token = 2 * 16 * 128 * 2  # 16 KV heads × head_dim 128 × K and V × 2 B
    kv = per_layer_token * (52 * 1024 + 10 * 32768)  # 52 local layers hold the window, 10 global hold all
    assert f"{kv:,} bytes" in summary and "GiB" in summary and "GB" in summary
    assert "text_config.num_key_value_heads" in formula
    assert len(rows["data"]) == 62
    summary, *_ = app_client.predict(
        "Gemma-3-27B", "{", 10, 1, "float16", "ideal", 80, "bfloat16", None, 10, api_name="/kv_calculate"
    )
    assert summary.startswith("**Can't calculate:** The config is not valid JSON")
    loaded = app_client.predict(kv_tab.LOADED, api_name="/kv_preset_config")
    assert json.loads(loaded)["num_hidden_layers"] == 30  # the loaded model's config is back in the editor
    result, table = app_client.predict(16, api_name="/kv_measure")
    assert f"Measured {2 * 30 * 3 * 64 * 16 * 4:,} bytes" in result and "equal to the byte" in result
    assert all(row[4] for row in table["data"]) and len(table["data"]) == 30
    result, table = app_client.predict("int4", 16, api_name="/kv_measure_quant")  # a real QuantizedCache
    assert "### int4 cache" in result and "equal to the byte" in result and len(table["data"]) == 30
