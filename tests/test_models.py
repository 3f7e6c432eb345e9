"""Several models in one process (playground/models): what is available, the memory estimate before a
load, loading with progress, the bound (least recently used unloaded, or a refusal that says why), one
batch and KV store per model, a remote engine as one side, and clear messages for bad names."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from playground.chat import ChatRequest, run_chat
from playground.compare import Side, run_compare
from playground.engine.embedded import EMBEDDED_MODELS
from playground.engine.remote.launcher import LlamaServer
from playground.engine.sampling import SamplingSettings
from playground.errors import EngineUnavailable, PlaygroundError
from playground.models import ModelRegistry, cached_hub_models, estimate_memory, model_key
from playground.settings import load_settings
from tests.conftest import make_tiny_llama

GREEDY = SamplingSettings(temperature=0)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
GB = 10**9


@pytest.fixture()
def tiny_dir(embedded_lm, tmp_path) -> str:
    """A real model directory (a tiny random Llama with SmolLM2's tokenizer): a third model to load."""
    tiny = make_tiny_llama(embedded_lm.tokenizer)
    tiny.model.save_pretrained(tmp_path)
    embedded_lm.tokenizer.save_pretrained(tmp_path)
    return str(tmp_path)


def registry_with(embedded_lm, **settings) -> ModelRegistry:
    registry = ModelRegistry(load_settings(device="cpu", **settings))
    registry.add(None, embedded_lm)  # the app's own model: pinned
    return registry


@pytest.mark.parametrize("model", ["embedded_lm", "gemma_lm"])
def test_the_estimate_counts_the_parameters_before_loading(model, request):
    lm = request.getfixturevalue(model)
    name = "gemma-3-270m" if model == "gemma_lm" else None
    estimate = estimate_memory(name, "cpu", cache_root=Path(load_settings().cache_dir))
    assert estimate.parameters == lm.num_parameters
    assert estimate.weights_bytes == 4 * lm.num_parameters and estimate.dtype == "float32"
    assert estimate.load_bytes == estimate.weights_bytes  # converted already: the cache is read
    assert (
        estimate_memory(name, "cpu", cache_root=Path("/nonexistent")).load_bytes == 2 * estimate.weights_bytes
    )
    assert f"{lm.num_parameters / 1e6:,.1f} M parameters × 4 B (float32)" in estimate.line()


def test_a_local_directory_is_estimated_from_its_config(tiny_dir, embedded_lm):
    tiny = make_tiny_llama(embedded_lm.tokenizer)
    assert estimate_memory(tiny_dir, "cpu", "bfloat16").weights_bytes == 2 * tiny.num_parameters


def test_an_unknown_model_name_gets_a_clear_message(embedded_lm):
    registry = registry_with(embedded_lm)
    with pytest.raises(PlaygroundError, match=r"Unknown model 'no-such/model'.*gemma-3-270m.*offline") as err:
        registry.engine("no-such/model")
    assert "Traceback" not in str(err.value)
    assert registry.loaded() == [model_key(None)]  # nothing else changed
    with pytest.raises(PlaygroundError, match="model name is empty"):
        registry.engine("  ")


def test_an_unreachable_hub_is_said_in_the_pages_language_not_in_huggingface_hubs(monkeypatch):
    from playground.models.estimate import unknown_model
    from playground.ui.i18n import localize

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub = OSError("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them")
    error = unknown_model("org/model", hub)
    assert "could not be reached, and it is not cached here" in str(error) and "We couldn't" not in str(error)
    assert "连不上 Hub" in localize(error.message, "zh")
    other = unknown_model("org/model", OSError("org/model is not a valid model identifier"))
    assert "(org/model is not a valid model identifier)" in str(other) and "check the spelling" in str(other)


def test_the_picker_lists_loaded_embedded_and_cached_models(embedded_lm, tiny_dir, tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    snapshot = hub / "models--acme--tiny-lm" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(Path(tiny_dir, "config.json").read_text())
    (hub / "models--acme--no-config" / "snapshots" / "x").mkdir(parents=True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    assert cached_hub_models() == ["acme/tiny-lm"]
    entries = {e.name: e for e in registry_with(embedded_lm).available()}
    assert entries["smollm2-135m-instruct"].loaded and entries["smollm2-135m-instruct"].kind == "loaded"
    gemma = entries["gemma-3-270m"]
    assert (
        gemma.kind == "embedded"
        and not gemma.loaded
        and gemma.note == "238 MB, " + EMBEDDED_MODELS["gemma-3-270m"].terms
    )
    assert entries["acme/tiny-lm"].kind == "cached"


def test_loading_shows_the_estimate_then_progress_and_keeps_the_model(embedded_lm):
    registry = registry_with(embedded_lm)
    events = list(registry.iter_load("gemma-3-270m"))
    messages = [e.message for e in events]
    assert messages[0].startswith("Memory estimate: gemma-3-270m: 268.1 M parameters")
    assert any("Loading gemma-3-270m from its cache" in m for m in messages)
    assert events[-1].engine is not None and events[-1].engine.num_parameters == 268_098_176
    assert registry.engine("gemma-3-270m") is events[-1].engine  # held: not loaded again
    assert registry.loaded() == ["smollm2-135m-instruct", "gemma-3-270m"]
    assert registry.engine() is embedded_lm  # no name: the app's own model
    gemma = events[-1].engine
    # each model has its own batch and KV store
    assert gemma.batcher is not embedded_lm.batcher and gemma.kv_store is not embedded_lm.kv_store
    answer = run_chat(gemma, ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=3))
    assert answer.answer_ids and gemma.batcher.iterations > 0


def test_the_least_recently_used_idle_model_is_unloaded(embedded_lm, tiny_dir):
    registry = registry_with(embedded_lm, max_models=2)
    first = registry.engine(tiny_dir)
    messages = []
    second = registry.engine("gemma-3-270m", progress=messages.append)
    assert f"Unloaded {tiny_dir} (least recently used) to make room for gemma-3-270m." in messages
    assert registry.loaded() == ["smollm2-135m-instruct", "gemma-3-270m"] and second is not first
    assert first.kv_store.keys() == []  # the unloaded engine freed its caches


def test_a_model_in_use_is_kept_and_the_load_refused_with_the_reason(embedded_lm, tiny_dir):
    registry = registry_with(embedded_lm, max_models=2)
    with registry.using("gemma-3-270m") as gemma:
        with pytest.raises(PlaygroundError) as err:
            registry.engine(tiny_dir)
        assert gemma is registry.engine("gemma-3-270m")
    assert str(err.value) == (
        f"Cannot load {tiny_dir}: 2 models are loaded, the most at once (PLAYGROUND_MAX_MODELS=2), and none "
        "can be unloaded now (smollm2-135m-instruct: the app’s own model; gemma-3-270m: in use by 1)."
    )
    with pytest.raises(
        PlaygroundError, match="smollm2-135m-instruct stays loaded: it is the app's own model"
    ):
        registry.unload("smollm2-135m-instruct")
    registry.unload("gemma-3-270m")  # idle now
    assert registry.loaded() == ["smollm2-135m-instruct"]


def test_a_model_that_wont_fit_is_refused_before_loading(embedded_lm):
    loads = []
    registry = ModelRegistry(
        load_settings(device="cpu"), loader=lambda *a, **k: loads.append(a), free_bytes=lambda: GB // 2
    )
    registry.add(None, embedded_lm)
    with pytest.raises(PlaygroundError) as err:
        registry.engine("gemma-3-270m")
    assert str(err.value).startswith(
        "Cannot load gemma-3-270m: it needs about 1.61 GB (gemma-3-270m: 268.1 M parameters × 4 B (float32) "
        "= 1.07 GB of weights, plus 512 MiB kept free) and 0.50 GB is free here."
    )
    assert loads == [] and registry.loaded() == ["smollm2-135m-instruct"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_remote_side_that_is_down_gets_a_clear_message(embedded_lm):
    registry = registry_with(embedded_lm)
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(EngineUnavailable, match=r"Cannot reach .*127\.0\.0\.1.* Is it running\?"):
        registry.connect("big", url, "llama.cpp")
    assert registry.loaded() == ["smollm2-135m-instruct"]  # the other side keeps serving
    assert run_chat(registry.engine(), ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=2)).answer_ids


def test_a_server_never_takes_a_loaded_models_name(embedded_lm):
    """Connecting a server under the app's own model's name is refused before connecting: the model,
    its tabs' caches and its batch stay."""
    registry = registry_with(embedded_lm)
    with pytest.raises(PlaygroundError, match="give the server another name") as raised:
        registry.connect("smollm2-135m-instruct", f"http://127.0.0.1:{_closed_port()}", "llama.cpp")
    assert raised.value.message.key == "models.error.name_taken"
    assert registry.engine() is embedded_lm and embedded_lm.batcher is not None


@pytest.mark.llama_server
def test_a_remote_engine_is_one_side_of_a_comparison(embedded_lm, gemma_lm):
    from playground.engine.loading import embedded_gguf_path

    registry = registry_with(embedded_lm)
    with LlamaServer.start(embedded_gguf_path("gemma-3-270m")) as server:
        remote = registry.connect("gemma (llama.cpp)", server.url, "llama.cpp")
        assert registry.engine("gemma (llama.cpp)") is remote and remote.vocab_size == 262_144
        assert "remote" in {e.kind for e in registry.available()}
        sides = [Side(embedded_lm, GREEDY), Side(remote, GREEDY)]
        result = run_compare(sides, QUESTION, max_new_tokens=6)
        assert not any(s.error for s in result.sides)
        assert result.sides[1].update.answer_ids  # the served Gemma answered


def test_one_model_on_quantized_weights_is_a_second_side(embedded_lm):
    registry = registry_with(embedded_lm)
    int8 = registry.engine(None, quantize="int8")
    assert int8 is not embedded_lm and int8.quantization == "int8"
    assert registry.loaded() == ["smollm2-135m-instruct", "smollm2-135m-instruct@int8"]
    sides = [Side(embedded_lm, GREEDY, label="float32"), Side(int8, GREEDY, label="int8")]
    result = run_compare(sides, QUESTION, max_new_tokens=6)
    for side, state in zip(sides, result.sides, strict=True):
        solo = run_chat(side.engine, ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=6))
        assert state.update.answer_ids == solo.answer_ids, state.name
