"""Each browser tab keeps its model (playground/workspace.py, ui/model_picker.py): a tab's workspace is
made on the model it picked and holds it in the app's ModelRegistry, so the registry's bound never
unloads a model a tab uses; the other tabs keep theirs; a refused pick leaves the tab as it was. Plain
functions on tiny models (a local model directory is the model picked); the real models through the
app are in tests/test_compare_tab.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import gradio as gr
import httpx
import pytest

from playground.engine.remote import connect
from playground.errors import PlaygroundError
from playground.models import ModelRegistry
from playground.settings import load_settings
from playground.ui.chat_controls import ChatControls
from playground.ui.chat_tab import ChatHandlers
from playground.ui.hood import VIEWS, HoodTab
from playground.ui.hood.base import HoodEnv
from playground.ui.hood.tab import texts_handler
from playground.ui.kv_tab import LOADED, KVHandlers
from playground.ui.model_picker import ModelPicker, model_choices
from playground.ui.state import TabStates
from playground.workspace import Workspaces
from tests.conftest import make_tiny_llama
from tests.remote_fakes import FakeLlamaServer, FakeModel

GREEDY = {"temperature": 0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0}


@pytest.fixture()
def tiny_dir(embedded_lm, tmp_path) -> str:
    """A real model directory (a tiny random Llama with SmolLM2's tokenizer, 3 layers where the app's
    tiny model has 2): a model to pick."""
    make_tiny_llama(embedded_lm.tokenizer, seed=3, num_hidden_layers=3).model.save_pretrained(tmp_path)
    embedded_lm.tokenizer.save_pretrained(tmp_path)
    return str(tmp_path)


@pytest.fixture()
def tiny(embedded_lm):
    return make_tiny_llama(embedded_lm.tokenizer)


def tab(session: str, lang: str | None = None) -> SimpleNamespace:
    """What a handler's gr.Request holds of a browser tab: its session id and page."""
    return SimpleNamespace(session_hash=session, query_params={"lang": lang} if lang else {}, headers={})


def workspaces_on(engine, **settings) -> Workspaces:
    return Workspaces(engine, 8, ModelRegistry(load_settings(device="cpu", batching="off", **settings)))


def picked(picker: ModelPicker, name: str, request) -> list[dict]:
    """Every update of a pick (as the status line shows them)."""
    return list(picker.model_pick(name, request))


def test_a_tab_starts_on_the_apps_model_and_keeps_the_one_it_picks(tiny, tiny_dir):
    workspaces = workspaces_on(tiny)
    picker = ModelPicker(workspaces)
    first = workspaces.get("tab-1")
    assert first.engine is tiny and first.model == "tiny-random-llama" == workspaces.model
    updates = picked(picker, tiny_dir, tab("tab-1"))
    statuses = [u["model_status"] for u in updates]
    assert statuses[0].startswith(f"**Loading {tiny_dir}**") and "Memory estimate:" in statuses[0]
    assert statuses[-1].startswith(f"**This tab uses {tiny_dir}** from now on")
    assert updates[-1]["model"].value == tiny_dir
    now = workspaces.get("tab-1")
    assert now is not first and now.model == tiny_dir and now.engine is not tiny
    assert workspaces.get("tab-2").engine is tiny  # the other tabs keep theirs
    assert picked(picker, tiny_dir, tab("tab-1"))[-1]["model_status"] == f"This tab uses {tiny_dir}."
    assert workspaces.get("tab-1") is now  # the same model again: nothing changes


def test_a_switch_frees_the_old_models_caches_and_answers_on_the_new_one(tiny, tiny_dir):
    workspaces = workspaces_on(tiny)
    handlers = ChatHandlers(tiny, load_settings(), workspaces)
    controls = ChatControls("", **GREEDY, max_new_tokens=3, seed="0", show_template=False)
    list(handlers.chat("Hello", [], controls, tab("t")))
    old = workspaces.get("t")
    assert tiny.kv_store.keys() == [old.chat.key]  # the answer's cache, on the tab's model
    list(ModelPicker(workspaces).model_pick(tiny_dir, tab("t")))
    new = workspaces.get("t")
    assert tiny.kv_store.keys() == []  # the old workspace was released with its caches
    *_, after = handlers.chat("Hello", [], controls, tab("t"))
    assert new.engine.kv_store.keys() == [new.chat.key]
    logprobs = [[t.logprob for t in ws.chat.turn.shown.tokens] for ws in (old, new)]
    assert logprobs[0] != logprobs[1]  # another model's numbers (random tiny models both write "\n\n\n")
    assert after["history"][-1]["content"].startswith("\n\n\n")


def test_a_model_a_tab_uses_is_never_unloaded_to_make_room(tiny, tiny_dir, embedded_lm, tmp_path):
    workspaces = workspaces_on(tiny, max_models=2)
    picker, registry = ModelPicker(workspaces), workspaces.registry
    list(picker.model_pick(tiny_dir, tab("t1")))
    third = tmp_path / "third"
    make_tiny_llama(embedded_lm.tokenizer, seed=4).model.save_pretrained(third)
    embedded_lm.tokenizer.save_pretrained(third)
    with pytest.raises(PlaygroundError) as err:
        list(picker.model_pick(str(third), tab("t2")))
    assert f"{tiny_dir}: in use by 1" in str(err.value) and "PLAYGROUND_MAX_MODELS=2" in str(err.value)
    assert workspaces.get("t2").model == workspaces.model  # the refused tab keeps its model
    workspaces.release("t1")  # the tab closed: its model is idle, the next load may unload it
    updates = list(picker.model_pick(str(third), tab("t2")))
    assert any(f"Unloaded {tiny_dir} (least recently used)" in u["model_status"] for u in updates)
    assert registry.loaded() == ["tiny-random-llama", str(third)]


def test_the_kv_tabs_loaded_model_is_the_tabs_model(tiny, tiny_dir):
    workspaces = workspaces_on(tiny)
    kv = KVHandlers(tiny, workspaces)
    assert json.loads(kv.kv_preset_config(LOADED, tab("t")))["num_hidden_layers"] == 2
    list(ModelPicker(workspaces).model_pick(tiny_dir, tab("t")))
    changed = kv.kv_model_changed(LOADED, tab("t"))
    assert json.loads(changed["config_text"])["num_hidden_layers"] == 3  # the picked model's config
    assert json.loads(kv.kv_preset_config(LOADED, tab("other")))["num_hidden_layers"] == 2
    assert kv.kv_model_changed("Llama-3.1-8B", tab("t")) == {}  # a preset stays as it is
    rows = kv.kv_measure(16, tab("t"))["measure_table"]
    assert len(rows) == 3 and all(row[-1] for row in rows)  # measured on the tab's model: its 3 layers


def test_a_refused_pick_says_why_in_the_tabs_language_and_keeps_the_model(tiny):
    workspaces = workspaces_on(tiny)
    picker = ModelPicker(workspaces)
    updates = []
    with pytest.raises(PlaygroundError, match="Unknown model 'no-such-model'"):
        for update in picker.model_pick("no-such-model", tab("t", "zh")):
            updates.append(update)
    assert updates[-1]["model_status"].startswith("**未加载：no-such-model。** 未知的模型 'no-such-model'")
    assert updates[-1]["model"].value == "tiny-random-llama" == workspaces.get("t").model
    with pytest.raises(PlaygroundError, match="model name is empty"):
        list(picker.model_pick(" ", tab("t")))


def test_the_list_names_each_model_and_whether_it_is_loaded(tiny):
    workspaces = workspaces_on(tiny)
    choices = dict((name, label) for label, name in model_choices(workspaces.registry, "en"))
    assert choices["tiny-random-llama"] == "tiny-random-llama · loaded"
    assert choices["gemma-3-270m"] == "gemma-3-270m · embedded, not loaded (238 MB)"
    zh = dict((name, label) for label, name in model_choices(workspaces.registry, "zh", "typed/id"))
    assert zh["gemma-3-270m"] == "gemma-3-270m · 内置，未加载（238 MB）" and zh["typed/id"] == "typed/id"
    with gr.Blocks():
        shown = ModelPicker(workspaces).model_choices(tab("t"))["model"]
    assert shown.value == "tiny-random-llama"


def test_hold_and_let_go(tiny):
    registry = ModelRegistry(load_settings(device="cpu"))
    key = registry.add("tiny", tiny, pinned=False)
    assert registry.hold(key) is tiny and registry.key_of(tiny) == key
    with pytest.raises(PlaygroundError, match="stays loaded: 1 requests are using it"):
        registry.unload(key)
    registry.let_go(key)
    registry.let_go(key)  # one too many: no harm
    registry.unload(key)
    with pytest.raises(PlaygroundError, match=r"gemma-3-270m is not loaded \(loaded: none\)"):
        registry.hold("gemma-3-270m")


def test_the_lessons_note_follows_the_tabs_model(tiny):
    """Under the hood says its lessons can't run when the tab's model is a serving engine, and nothing
    when it runs in this process: by the tab's model, not the app's (a model picked re-runs it)."""
    server = FakeLlamaServer(FakeModel(tiny))
    served = connect(
        "http://fake-engine:8000",
        "llama.cpp",
        tokenizer=tiny.tokenizer,
        transport=httpx.MockTransport(server),
    )
    workspaces = workspaces_on(tiny)
    key = workspaces.registry.add("fake-llama-server", served, pinned=False)
    workspaces.use("tab-1", key)
    hood = HoodTab(HoodEnv.of(tiny, None), workspaces, TabStates(), VIEWS)
    texts = texts_handler(hood)
    tables = [None] * len(hood.tables)
    note = texts(*tables, tab("tab-1", "zh"))["hood_note"]
    assert note.visible is True and note.value.startswith("这些课程需要在本进程中运行的模型：")
    assert texts(*tables, tab("tab-2"))["hood_note"].visible is False  # the app's model runs them
    assert "hood_note" in hood.text_outputs
