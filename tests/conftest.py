"""Shared fixtures: the real embedded model (loaded once), tiny random models, a launched app."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing in the suite may reach the Hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from playground.engine.loading import load_model
from playground.engine.local import LocalEngine
from playground.engine.remote.launcher import llama_server_binary, why_no_binary

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build_llama_server.sh"


@pytest.fixture(scope="session")
def embedded_lm() -> LocalEngine:
    """The real embedded SmolLM2-135M-Instruct on CPU, float32 (cache dir from PLAYGROUND_CACHE_DIR)."""
    return load_model(device="cpu")


@pytest.fixture(scope="session")
def gemma_lm() -> LocalEngine:
    """The second embedded model, Gemma 3 270M (base model, sliding-window layers), on CPU in float32:
    loaded once per test session (about 80 s the first time ever, to convert its GGUF file; seconds
    from the cache after that)."""
    return load_model("gemma-3-270m", device="cpu")


def make_tiny_llama(tokenizer: AutoTokenizer, seed: int = 0, **config_overrides: object) -> LocalEngine:
    """A tiny random Llama with the embedded model's tokenizer: fast unit tests, never instead
    of the real model."""
    torch.manual_seed(seed)
    defaults = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    config = LlamaConfig(**{**defaults, **config_overrides})
    model = LlamaForCausalLM(config).eval()
    return LocalEngine(
        model, tokenizer, torch.device("cpu"), torch.float32, "tiny-random-llama", 0.0, "local"
    )


@pytest.fixture(scope="session")
def tiny_lm(embedded_lm: LocalEngine) -> LocalEngine:
    return make_tiny_llama(embedded_lm.tokenizer)


@pytest.fixture(scope="session")
def launched_app(embedded_lm: LocalEngine):
    """The full app on a free local port, shared by the gradio_client and browser tests.

    Yields the base URL."""
    from playground.settings import load_settings
    from playground.ui.app import build_demo, launch_local, launch_options

    demo = build_demo(embedded_lm, load_settings())
    url = launch_local(demo, **launch_options())
    yield url
    demo.close()


@pytest.fixture(scope="session")
def replay_app():
    """The bundled gallery served with no model (python app.py --replay docs/traces): its base URL."""
    from playground.traces import GALLERY, load_traces
    from playground.ui.app import launch_local, launch_options
    from playground.ui.replay import build_replay_demo

    demo = build_replay_demo(load_traces(GALLERY))
    yield launch_local(demo, **launch_options())
    demo.close()


@pytest.fixture(scope="session")
def app_client(launched_app: str):
    """A gradio_client.Client connected to the launched app."""
    from gradio_client import Client

    return Client(launched_app, verbose=False)


@pytest.fixture(autouse=True, scope="session")
def no_network_beyond_loopback():
    """Fail any connection to a non-loopback address: the suite must never reach the Hub."""
    import ipaddress
    import socket

    real_connect = socket.socket.connect

    def guarded_connect(self: socket.socket, address: object) -> object:
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and host != "localhost":
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise OSError(f"network access blocked in tests: {address}")
        return real_connect(self, address)

    socket.socket.connect = guarded_connect
    yield
    socket.socket.connect = real_connect


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (browser tests screenshot their failures)."""
    outcome = yield
    setattr(item, f"report_{call.when}", outcome.get_result())


# --- llama-server: built beside the tests ---------------------------------------------------------
# test.sh starts scripts/build_llama_server.sh in the background (6-9 minutes the first time on a
# machine) and sets PLAYGROUND_LLAMA_SERVER_BUILDING=1; the tests marked `llama_server` run last and
# wait for that build (the script takes a lock: a second call waits for the first, then reuses its
# binary). Run alone, with no build under way, they are skipped with the reason.


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that need llama-server last, so the build has the longest time to finish."""
    items.sort(key=lambda item: item.get_closest_marker("llama_server") is not None)


@pytest.fixture(scope="session")
def llama_server_path() -> Path:
    """The llama-server binary, once the build test.sh started beside the tests is done."""
    if llama_server_binary() is None and os.environ.get("PLAYGROUND_LLAMA_SERVER_BUILDING") == "1":
        subprocess.run([str(BUILD_SCRIPT)], capture_output=True, check=False)
    binary = llama_server_binary()
    if binary is None:
        pytest.skip(why_no_binary())
    return binary


@pytest.fixture(autouse=True)
def _waits_for_llama_server(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("llama_server") is not None:
        request.getfixturevalue("llama_server_path")
