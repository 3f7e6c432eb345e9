"""The model runtime: embedded model offline, converted-weights cache, clear load errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from playground.chat import ChatRequest, run_chat
from playground.engine.loading import embedded_cache_dir, load_model, verify_cache
from playground.engine.sampling import SamplingSettings
from playground.errors import PlaygroundError
from playground.settings import load_settings
from tests.conftest import make_tiny_llama

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


def test_embedded_model_answers_paris_with_the_hub_blocked(embedded_lm):
    answer = run_chat(
        embedded_lm, ChatRequest(FRANCE, settings=SamplingSettings(temperature=0), max_new_tokens=30)
    )
    assert "Paris" in answer.text
    assert embedded_lm.num_parameters == pytest.approx(134.5e6, rel=0.01)
    assert embedded_lm.device.type == "cpu" and embedded_lm.dtype == torch.float32


def _next_token_logits(lm, text: str) -> torch.Tensor:
    ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        return lm.model(ids).logits[0, -1]


def test_cache_is_reused_and_rebuilt_when_corrupt(embedded_lm, tmp_path):
    """The shared cache (written when the tests' model first loaded) copied in: it is used as is;
    half-written, it is converted again from the GGUF file (one conversion, the slow part)."""
    cache = embedded_cache_dir(tmp_path)
    shutil.copytree(embedded_cache_dir(Path(load_settings().cache_dir)), cache)
    assert verify_cache(cache) is None
    cached = load_model(device="cpu", cache_dir=tmp_path)
    assert cached.source == "cache"
    text = "The quick brown fox"
    reference = _next_token_logits(cached, text)
    del cached  # its weights may be memory-mapped from the file we are about to damage

    weights = cache / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # a half-written file
    assert "corrupt" in verify_cache(cache)
    rebuilt = load_model(device="cpu", cache_dir=tmp_path)
    assert rebuilt.source == "gguf"
    assert verify_cache(cache) is None
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name], "staging dir left behind"
    assert torch.equal(_next_token_logits(rebuilt, text), reference)
    assert load_model(device="cpu", cache_dir=tmp_path).source == "cache"  # the rewritten cache is used


def test_cache_without_manifest_is_reported(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert verify_cache(tmp_path) == "manifest missing or unreadable"
    (tmp_path / "manifest.json").write_text('{"files": {"config.json": "0"}}')
    assert "checksum" in verify_cache(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"name": "no-such-org/no-such-model"}, "offline"),
        ({"name": "/no/such/file.gguf"}, "GGUF file not found"),
        ({"device": "tpu"}, "Unknown device 'tpu'"),
        ({"device": "cuda"} if not torch.cuda.is_available() else {"device": "xla"}, "(?i)device"),
        ({"dtype": "float8"}, "Unknown dtype 'float8'"),
    ],
)
def test_bad_model_arguments_give_clear_messages(kwargs, expected):
    with pytest.raises(PlaygroundError, match=expected):
        load_model(**kwargs)


def test_local_model_directory_loads(tmp_path, embedded_lm):
    tiny = make_tiny_llama(embedded_lm.tokenizer, max_position_embeddings=128)
    tiny.model.save_pretrained(tmp_path)
    embedded_lm.tokenizer.save_pretrained(tmp_path)
    lm = load_model(str(tmp_path), device="cpu", dtype="bfloat16")
    assert lm.source == "local" and lm.dtype == torch.bfloat16 and lm.context_length == 128
    assert next(lm.model.parameters()).dtype == torch.bfloat16
    assert "cpu" in lm.describe() and "bfloat16" in lm.describe()
