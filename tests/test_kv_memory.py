"""KV-cache calculator: exact bytes on hand-written configs (expected values computed by hand from
2 (K and V) × layers × kv_heads × head_dim × tokens × batch × bytes), and real caches of tiny random
models of several architectures, byte for byte."""

from __future__ import annotations

import json
import time

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from playground import kv as kvm
from playground.engine.local import LocalEngine
from playground.errors import PlaygroundError
from playground.kv import kv_cache_bytes
from playground.kv.config import HUB_TIMEOUT_S
from playground.kv.presets import PRESETS

F16, F32 = 2, 4


def llama(layers=32, heads=32, kv=8, hidden=4096, **extra):
    return {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        **extra,
    }


# --- MHA / GQA / MQA and family key names -------------------------------------------------------------


def test_gqa_llama3_8b_shape():
    # 8B Llama: 32 layers, 8 KV heads, head_dim 4096/32 = 128; 8 sequences of 4096 tokens = 4 GiB.
    assert kv_cache_bytes(llama(), 4096, 8) == 2 * 32 * 8 * 128 * 4096 * 8 * F16 == 4 * 2**30


def test_mha_when_no_kv_head_key():
    config = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32}  # Llama-2-7B shape
    assert kv_cache_bytes(config, 4096) == 2 * 32 * 32 * 128 * 4096 * F16


def test_mqa_via_num_key_value_heads():
    assert kv_cache_bytes(llama(kv=1), 100) == 2 * 32 * 1 * 128 * 100 * F16


def test_gpt2_keys():
    config = {"model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257}
    assert kv_cache_bytes(config, 1024, dtype="float32") == 2 * 12 * 12 * 64 * 1024 * F32


def test_gpt2_keys_without_model_type():
    config = {"n_layer": 24, "n_head": 16, "n_embd": 1024}
    assert kv_cache_bytes(config, 10) == 2 * 24 * 16 * 64 * 10 * F16


def test_falcon_multi_query_is_one_kv_head():
    config = {
        "model_type": "falcon",
        "hidden_size": 4544,
        "num_attention_heads": 71,
        "num_hidden_layers": 32,
        "multi_query": True,
    }
    assert kv_cache_bytes(config, 2048) == 2 * 32 * 1 * 64 * 2048 * F16
    assert kv_cache_bytes({**config, "multi_query": False}, 2048) == 2 * 32 * 71 * 64 * 2048 * F16


def test_falcon_new_decoder_architecture_groups_and_transformers_broadcast():
    config = {
        "model_type": "falcon",
        "hidden_size": 8192,
        "num_attention_heads": 128,
        "num_kv_heads": 8,
        "num_hidden_layers": 60,
        "new_decoder_architecture": True,
    }
    assert kv_cache_bytes(config, 2048) == 2 * 60 * 8 * 64 * 2048 * F16
    # transformers' FalconAttention broadcasts K/V to all 128 heads before caching
    assert kv_cache_bytes(config, 2048, mode="transformers") == 2 * 60 * 128 * 64 * 2048 * F16


def test_nested_text_config_uses_the_family_defaults():
    # gemma-3-4b's published text_config leaves heads (8), KV heads (4) and head_dim (256) to the defaults.
    config = {
        "model_type": "gemma3",
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "num_hidden_layers": 34,
            "sliding_window": 1024,
        },
    }
    # pattern 6: layers 5, 11, 17, 23, 29 global (5), the other 29 sliding
    expected = 2 * 4 * 256 * F16 * (29 * 1024 + 5 * 4096)
    assert kv_cache_bytes(config, 4096) == expected
    sources = {q: s for q, _, s in kvm.kv_geometry(config).sources}
    assert sources["layers"] == "text_config.num_hidden_layers"
    assert "default of Gemma3TextConfig" in sources["head_dim"]


def test_explicit_head_dim_wins():
    # Gemma-7B: hidden 3072 / 16 heads = 192, but head_dim is 256.
    config = {
        "model_type": "gemma",
        "hidden_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 256,
    }
    assert kv_cache_bytes(config, 100) == 2 * 28 * 16 * 256 * 100 * F16
    raw = {"hidden_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "head_dim": 256}
    assert kv_cache_bytes(raw, 100) == 2 * 28 * 16 * 256 * 100 * F16


def test_config_object_and_json_text_give_the_same_bytes():
    config = llama(layers=4, heads=8, kv=2, hidden=512)
    obj = AutoConfig.for_model(**config)
    expected = 2 * 4 * 2 * 64 * 77 * F16
    assert kv_cache_bytes(obj, 77) == kv_cache_bytes(json.dumps(config), 77) == expected


# --- sliding windows ------------------------------------------------------------------------------------


def test_window_on_every_layer_mistral():
    config = {
        "model_type": "mistral",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "sliding_window": 4096,
    }
    per_token = 2 * 32 * 8 * 128 * F16
    assert kv_cache_bytes(config, 1000) == per_token * 1000
    assert kv_cache_bytes(config, 100_000) == per_token * 4096  # ideal: min(seq_len, window)
    assert (
        kv_cache_bytes(config, 100_000, mode="transformers") == per_token * 4095
    )  # DynamicCache: window - 1


def test_alternating_local_global_gemma2():
    config = {
        "model_type": "gemma2",
        "hidden_size": 3584,
        "num_hidden_layers": 42,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "sliding_window": 4096,
    }
    per_layer_token = 2 * 8 * 256 * F16
    assert kv_cache_bytes(config, 8192) == per_layer_token * (21 * 4096 + 21 * 8192)
    kinds = [layer.kind for layer in kvm.kv_geometry(config).layers]
    assert kinds[:4] == ["sliding", "full", "sliding", "full"]


def test_layer_types_list_without_model_type():
    types = ["sliding_attention", "full_attention", "linear_attention", "sliding_attention"]
    config = {
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "sliding_window": 16,
        "layer_types": types,
    }
    per_layer_token = 2 * 2 * 64 * F16
    assert kv_cache_bytes(config, 100) == per_layer_token * (16 + 100 + 0 + 16)


def test_sliding_window_pattern_without_model_type():
    config = {
        "hidden_size": 256,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "sliding_window": 10,
        "sliding_window_pattern": 3,
    }
    # layers 2 and 5 global, four sliding
    assert kv_cache_bytes(config, 50) == 2 * 1 * 64 * F16 * (4 * 10 + 2 * 50)


def test_use_sliding_window_false_means_no_window():
    config = {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "sliding_window": 4096,
        "use_sliding_window": False,
        "max_window_layers": 28,
    }
    assert kv_cache_bytes(config, 32768) == 2 * 28 * 4 * 128 * 32768 * F16
    raw = {k: v for k, v in config.items() if k != "model_type"}
    assert kv_cache_bytes(raw, 32768) == 2 * 28 * 4 * 128 * 32768 * F16


def test_qwen2_use_sliding_window_true_windows_the_top_layers():
    config = {
        "model_type": "qwen2",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "sliding_window": 8,
        "use_sliding_window": True,
        "max_window_layers": 2,
    }
    assert kv_cache_bytes(config, 20) == 2 * 2 * 64 * F16 * (2 * 20 + 2 * 8)


# --- MLA and layers without cache -------------------------------------------------------------------------


def test_deepseek_v3_mla_latent():
    config = PRESETS["DeepSeek-V3"].config
    expected = 61 * (512 + 64) * 4096 * 2  # one latent + one rotary key per layer and token, bf16
    assert kv_cache_bytes(config, 4096, dtype="bfloat16") == expected
    # transformers 5 caches the same latents (not per-head K/V)
    assert kv_cache_bytes(config, 4096, dtype="bfloat16", mode="transformers") == expected
    # versus the naive MHA cache of 128 heads × (192 K + 128 V) it would otherwise be
    assert expected * 50 < 61 * 128 * (192 + 128) * 4096 * 2


def test_hybrid_linear_attention_layers_hold_nothing():
    config = {
        "model_type": "qwen3_next",
        "hidden_size": 2048,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "full_attention_interval": 4,
    }
    # layers 3 and 7 are full attention, the six others are linear attention (Gated DeltaNet)
    assert kv_cache_bytes(config, 1000) == 2 * 2 * 2 * 256 * 1000 * F16
    kinds = [layer.kind for layer in kvm.kv_geometry(config).layers]
    assert kinds.count("none") == 6


def test_jamba_style_attention_indices_without_model_type():
    config = {
        "hidden_size": 512,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "attn_layer_indices": [4],
    }
    assert kv_cache_bytes(config, 300) == 2 * 1 * 2 * 64 * 300 * F16


# --- dtypes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "row_bytes"),
    [
        ("float32", 512),
        ("float16", 256),
        ("bfloat16", 256),
        ("int8", 128 + 8),  # QuantizedCache: + a float16 scale and zero per 64 values (2 groups per row)
        ("int4", 64 + 8),
        ("int2", 32 + 8),
        ("q8_0", 4 * 34),
        ("q4_0", 4 * 18),
    ],
)
def test_dtypes_per_128_value_row(dtype, row_bytes):
    # a 128-value row: float16 = 256 B; q8_0 = 4 blocks × (32 + 2) B; q4_0 = 4 blocks × (16 + 2) B
    assert kv_cache_bytes(llama(), 10, 3, dtype=dtype) == 2 * 32 * 8 * 10 * 3 * row_bytes


def test_fp8_adds_one_float32_scale_per_layer_for_keys_and_one_for_values():
    assert kv_cache_bytes(llama(), 10, 3, dtype="fp8") == 2 * 32 * 8 * 10 * 3 * 128 + 2 * 32 * 4


def test_group_scales_follow_the_model_dtype():
    # int4 in a float32 model: a float32 scale and zero per 64 values, 128-value rows = 2 groups
    assert kv_cache_bytes(llama(), 10, 3, dtype="int4", scale_dtype="float32") == 2 * 32 * 8 * 10 * 3 * (
        64 + 16
    )


def test_dtype_aliases():
    assert kv_cache_bytes(llama(), 10, dtype="bf16") == kv_cache_bytes(llama(), 10, dtype="torch.bfloat16")


# --- bad input ------------------------------------------------------------------------------------------


def test_malformed_json():
    with pytest.raises(PlaygroundError, match="not valid JSON"):
        kv_cache_bytes('{"num_hidden_layers": 32,', 10)


def test_missing_keys_are_named():
    with pytest.raises(PlaygroundError, match="num_hidden_layers") as info:
        kv_cache_bytes({"hidden_size": 4096}, 10)
    assert "num_attention_heads" in str(info.value)
    with pytest.raises(PlaygroundError, match="hidden_size or head_dim"):
        kv_cache_bytes({"model_type": "llama", "num_hidden_layers": 2}, 10)


@pytest.mark.parametrize("bad", [0, -5, 1.5, "ten"])
def test_bad_lengths(bad):
    with pytest.raises(PlaygroundError, match="positive whole number"):
        kv_cache_bytes(llama(), bad)
    with pytest.raises(PlaygroundError, match="positive whole number"):
        kv_cache_bytes(llama(), 10, batch_size=bad)


def test_unknown_dtype_and_mode():
    with pytest.raises(PlaygroundError, match="Unknown dtype 'float12'"):
        kv_cache_bytes(llama(), 10, dtype="float12")
    with pytest.raises(PlaygroundError, match="Unknown mode"):
        kv_cache_bytes(llama(), 10, mode="vllm")


def test_non_object_json():
    with pytest.raises(PlaygroundError, match="JSON object"):
        kv_cache_bytes("[1, 2]", 10)


# --- breakdown, formula, weights, solver ----------------------------------------------------------------


def test_breakdown_rows_and_formula():
    config = {
        "model_type": "gemma2",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "sliding_window": 8,
    }
    b = kvm.kv_cache_breakdown(config, 20, 2, "float32")
    assert [(x.index, x.kind, x.tokens) for x in b.layers] == [
        (0, "sliding", 8),
        (1, "full", 20),
        (2, "sliding", 8),
        (3, "full", 20),
    ]
    assert b.layers[1].bytes == 2 * 2 * 32 * 20 * 2 * F32
    assert b.total_bytes == sum(x.bytes for x in b.layers) == kv_cache_bytes(config, 20, 2, "float32")
    text = "\n".join(kvm.formula_lines(b))
    assert "2 sliding layers × 2 KV heads × 32 head_dim" in text and "8 tokens (window)" in text
    assert b.gib == b.total_bytes / 2**30 and b.gb == b.total_bytes / 1e9


def test_units():
    assert kvm.format_bytes(4 * 2**30) == "4.00 GiB (4.29 GB)"


def test_parameter_estimates_close_to_published():
    for name in ("Llama-2-7B", "Llama-3.1-8B", "Mixtral-8x7B", "DeepSeek-V3", "GPT-2", "Falcon-7B"):
        preset = PRESETS[name]
        assert kvm.estimate_parameters(preset.config) == pytest.approx(preset.num_parameters, rel=0.02), name


def test_weights_bytes():
    assert kvm.weights_bytes(8e9, "bfloat16") == 16 * 10**9
    assert kvm.weights_bytes(32, "q4_0") == 18


def test_fit_solver_dense():
    config = llama()  # 128 KiB per token in float16
    per_token = 2 * 32 * 8 * 128 * F16
    gpu, weights = 80 * 10**9, 16 * 10**9
    fit = kvm.fit_on_gpu(config, gpu, weights, 8192, 1, "float16", "ideal", 0.10)
    free = gpu - weights - 8 * 10**9
    assert fit.free_for_kv == free and fit.fits
    assert fit.max_seq_len == free // per_token
    assert fit.max_batch == free // (per_token * 8192)


def test_fit_solver_windowed_model_has_no_length_limit():
    config = {
        "model_type": "mistral",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "sliding_window": 4096,
    }
    fit = kvm.fit_on_gpu(config, 24 * 10**9, 15 * 10**9, 8192, 1)
    assert fit.max_seq_len is None
    too_small = kvm.fit_on_gpu(config, 16 * 10**9, 15 * 10**9, 8192, 1)
    assert not too_small.fits and too_small.free_for_kv < 0 and too_small.max_seq_len == 0


def test_curve_levels_off_at_the_window():
    config = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "sliding_window": 100}
    curve = kvm.kv_curve(config, [50, 100, 200, 5000])
    assert curve[0] < curve[1] == curve[2] == curve[3] == 2 * 2 * 4 * 64 * 100 * F16


def test_every_preset_computes():
    assert len(PRESETS) >= 15
    for preset in PRESETS.values():
        for mode in kvm.MODES:
            assert kv_cache_bytes(preset.config, 1024, mode=mode) > 0


def test_calculation_is_fast():
    configs = [p.config for p in PRESETS.values()]
    for config in configs:  # warm the per-family config classes
        kv_cache_bytes(config, 10)
    for config in configs:
        started = time.perf_counter()
        for n in (1000, 2000, 3000):
            kvm.kv_cache_breakdown(config, n, 4, "q4_0")
            kvm.fit_on_gpu(config, 80 * 10**9, 10**9, n, 4)
        assert (time.perf_counter() - started) / 3 < 0.1


# --- measured vs predicted on real caches -------------------------------------------------------------


def _tiny(model_type: str, **config):
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(model_type, vocab_size=64, **config)
    return AutoModelForCausalLM.from_config(cfg).eval()


SMALL = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
TINY_MODELS = {
    "llama": ("llama", SMALL),
    "gemma3_sliding": (
        "gemma3_text",
        {**SMALL, "num_hidden_layers": 4, "head_dim": 16, "sliding_window": 5, "sliding_window_pattern": 2},
    ),
    "qwen2_no_window": ("qwen2", {**SMALL, "sliding_window": 4, "use_sliding_window": False}),
    "mistral_window": ("mistral", {**SMALL, "sliding_window": 6}),
    "gpt2": ("gpt2", {"n_embd": 32, "n_layer": 2, "n_head": 4, "bos_token_id": 0, "eos_token_id": 0}),
    "falcon_new_arch": (
        "falcon",
        {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_kv_heads": 2,
            "new_decoder_architecture": True,
            "bos_token_id": 0,
            "eos_token_id": 0,
        },
    ),
    "deepseek_v3_mla": (
        "deepseek_v3",
        {
            **SMALL,
            "num_key_value_heads": 4,
            "moe_intermediate_size": 16,
            "kv_lora_rank": 16,
            "q_lora_rank": 8,
            "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 8,
            "v_head_dim": 8,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": 1,
        },
    ),
}


def _engine(model, dtype=torch.float32) -> LocalEngine:
    """The engine around a tiny model of any architecture (the measurement runs through the engine)."""
    return LocalEngine(model, None, torch.device("cpu"), dtype, f"tiny {model.config.model_type}")


@pytest.mark.parametrize("name", list(TINY_MODELS))
@pytest.mark.parametrize("seq_len", [3, 9])
def test_tiny_models_measured_equals_predicted(name, seq_len):
    model = _tiny(TINY_MODELS[name][0], **TINY_MODELS[name][1])
    m = kvm.measure_vs_predicted(_engine(model), seq_len, batch_size=2)
    assert m.measured_bytes > 0
    assert list(m.measured_layers) == [layer.bytes for layer in m.predicted.layers]
    assert m.equal


def test_tiny_gemma3_window_by_hand():
    model = _tiny("gemma3_text", **TINY_MODELS["gemma3_sliding"][1])
    measured, _ = _engine(model).measure_cache(9, 2)
    sliding, full = (
        2 * 2 * 2 * 16 * 4 * F32,
        2 * 2 * 2 * 16 * 9 * F32,
    )  # window 5 keeps 4 tokens; full keeps 9
    assert measured == [sliding, full, sliding, full]


def test_embedded_model_measured_equals_predicted(embedded_lm):
    m = kvm.measure_vs_predicted(embedded_lm, 24)
    assert m.measured_bytes == 2 * 30 * 3 * 64 * 24 * F32  # SmolLM2-135M, float32 on CPU
    assert m.equal


def test_tiny_bfloat16_model_predicts_in_its_own_dtype():
    model = _tiny("llama", **SMALL).to(torch.bfloat16)
    m = kvm.measure_vs_predicted(_engine(model, torch.bfloat16), 7, batch_size=2)
    assert m.dtype == "bfloat16" and m.predicted.dtype.name == "bfloat16"
    assert (
        m.measured_bytes == 2 * 3 * 2 * 2 * 8 * 7 * 2
    )  # K+V × 3 layers × batch 2 × 2 heads × 8 dim × 7 × 2 B
    assert m.equal


# --- loading a config.json from disk: only model configs, never other files ----------------------------

SECRET = "c2VjcmV0LXRva2Vu"  # what a credentials file might hold; must never appear in a message


def test_load_config_refuses_files_not_named_config_json(tmp_path):
    for name in ("credentials.json", "config.yaml", ".env"):
        secret = tmp_path / name
        secret.write_text(json.dumps({**PRESETS["Mistral-7B-v0.1"].config, "token": SECRET}))
        with pytest.raises(PlaygroundError, match=r"only a file named config\.json") as info:
            kvm.load_config_file(str(secret))
        assert SECRET not in str(info.value)
    with pytest.raises(PlaygroundError, match=r"only a file named config\.json"):
        kvm.load_config_file(str(tmp_path / "missing.txt"))


def test_load_config_refuses_a_directory_without_config_json(tmp_path):
    (tmp_path / "secrets.json").write_text(json.dumps({"model_type": "llama", "token": SECRET}))
    with pytest.raises(PlaygroundError, match=r"has no config\.json") as info:
        kvm.load_config_file(str(tmp_path))
    assert SECRET not in str(info.value)


def test_load_config_refuses_config_json_that_is_not_a_model_config(tmp_path):
    docker_like = {"auths": {"registry.example.com": {"auth": SECRET}}, "credsStore": "desktop"}
    (tmp_path / "config.json").write_text(json.dumps(docker_like))
    for given in (tmp_path, tmp_path / "config.json"):
        with pytest.raises(PlaygroundError, match="does not look like a model config") as info:
            kvm.load_config_file(str(given))
        message = str(info.value)
        assert "model_type" in message and "architectures" in message and "num_hidden_layers" in message
        assert SECRET not in message and "auths" not in message and "registry" not in message


def test_load_config_refuses_non_json_and_binary_config_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(f"token = {SECRET}\n")
    with pytest.raises(PlaygroundError, match="not valid JSON") as info:
        kvm.load_config_file(str(path))
    assert SECRET not in str(info.value)
    path.write_bytes(b"\xff\xfe" + SECRET.encode())
    with pytest.raises(PlaygroundError, match="not UTF-8") as info:
        kvm.load_config_file(str(path))
    assert SECRET not in str(info.value)


def test_load_config_home_path_is_checked_like_any_other(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".docker").mkdir()
    (tmp_path / ".docker" / "config.json").write_text(json.dumps({"auths": {"x": {"auth": SECRET}}}))
    with pytest.raises(PlaygroundError, match="does not look like a model config") as info:
        kvm.load_config_file("~/.docker/config.json")
    assert SECRET not in str(info.value)


def test_load_config_from_real_model_dirs(tmp_path, embedded_lm):
    from pathlib import Path

    from playground.engine.loading import embedded_cache_dir
    from playground.settings import load_settings

    # the embedded model's converted-weights directory (written by its first load)
    config = kvm.load_config_file(str(embedded_cache_dir(Path(load_settings().cache_dir))))
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30
    _tiny("qwen2", **SMALL).config.save_pretrained(tmp_path)  # a directory as save_pretrained writes it
    assert kvm.load_config_file(str(tmp_path))["num_key_value_heads"] == 2
    assert kvm.load_config_file(str(tmp_path / "config.json"))["model_type"] == "qwen2"
    linked = tmp_path / "snapshot"  # the Hub cache's layout: config.json is a link to a blob
    linked.mkdir()
    (linked / "config.json").symlink_to(tmp_path / "config.json")
    assert kvm.load_config_file(str(linked))["model_type"] == "qwen2"


def test_a_hub_id_without_a_connection_is_told_at_once_without_huggingface_hub_retries(monkeypatch):
    """Online by the settings but with no way to the Hub (conference Wi-Fi): said at once, and
    huggingface_hub (retries, a warning each, many seconds) is not asked."""
    import huggingface_hub

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("huggingface_hub was asked while the Hub cannot be reached")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", never)
    started = time.perf_counter()
    with pytest.raises(PlaygroundError, match=r"the Hub cannot be reached from here \(huggingface\.co"):
        kvm.load_config_file("Qwen/Qwen2.5-7B")
    assert time.perf_counter() - started < HUB_TIMEOUT_S + 0.5


def test_load_config_hub_id_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PlaygroundError, match="Hub is offline"):
        kvm.load_config_file("Qwen/Qwen2.5-7B")
    with pytest.raises(PlaygroundError, match="Enter a path"):
        kvm.load_config_file("  ")
