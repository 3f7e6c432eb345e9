"""Preset model configs for the KV-cache calculator, written by hand from the published config.json files.

Only the keys that matter for the cache and the weights are kept (plus model_type, so transformers' own
config classes fill in the same defaults they would for the full file). Parameter counts are the
published totals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Preset:
    """A well-known model: its (trimmed) config.json and its published parameter count."""

    name: str
    config: dict[str, Any]
    num_parameters: int
    note: str = ""


def _llama(hidden: int, layers: int, heads: int, kv: int, inter: int, vocab: int, **extra: Any) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        **extra,
    }


GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_hidden_layers": 62,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "sliding_window": 1024,
        "query_pre_attn_scalar": 168,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    },
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "num_hidden_layers": 27},
}

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_group": 8,
    "topk_group": 4,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
}

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "Llama-2-7B", _llama(4096, 32, 32, 32, 11008, 32000, max_position_embeddings=4096), 6_738_415_616
        ),
        Preset(
            "Llama-2-13B",
            _llama(5120, 40, 40, 40, 13824, 32000, max_position_embeddings=4096),
            13_015_864_320,
        ),
        Preset(
            "Llama-2-70B", _llama(8192, 80, 64, 8, 28672, 32000, max_position_embeddings=4096), 68_976_648_192
        ),
        Preset(
            "Llama-3.1-8B",
            _llama(4096, 32, 32, 8, 14336, 128256, max_position_embeddings=131072),
            8_030_261_248,
        ),
        Preset(
            "Llama-3.1-70B",
            _llama(8192, 80, 64, 8, 28672, 128256, max_position_embeddings=131072),
            70_553_706_496,
        ),
        Preset(
            "Llama-3.1-405B",
            _llama(16384, 126, 128, 8, 53248, 128256, max_position_embeddings=131072),
            405_853_388_800,
        ),
        Preset(
            "Llama-3.2-1B",
            _llama(
                2048,
                16,
                32,
                8,
                8192,
                128256,
                head_dim=64,
                tie_word_embeddings=True,
                max_position_embeddings=131072,
            ),
            1_235_814_400,
        ),
        Preset(
            "Mistral-7B-v0.1",
            {
                "architectures": ["MistralForCausalLM"],
                "model_type": "mistral",
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "sliding_window": 4096,
                "vocab_size": 32000,
                "max_position_embeddings": 32768,
            },
            7_241_732_096,
            "sliding window of 4096 on every layer",
        ),
        Preset(
            "Mixtral-8x7B",
            {
                "architectures": ["MixtralForCausalLM"],
                "model_type": "mixtral",
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "num_local_experts": 8,
                "num_experts_per_tok": 2,
                "sliding_window": None,
                "vocab_size": 32000,
                "max_position_embeddings": 32768,
            },
            46_702_792_704,
        ),
        Preset(
            "Qwen2.5-7B",
            {
                "architectures": ["Qwen2ForCausalLM"],
                "model_type": "qwen2",
                "hidden_size": 3584,
                "intermediate_size": 18944,
                "num_hidden_layers": 28,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "max_window_layers": 28,
                "sliding_window": 131072,
                "use_sliding_window": False,
                "vocab_size": 152064,
                "max_position_embeddings": 131072,
                "tie_word_embeddings": False,
            },
            7_615_616_512,
            "use_sliding_window: false, so no window",
        ),
        Preset(
            "Qwen2.5-0.5B",
            {
                "architectures": ["Qwen2ForCausalLM"],
                "model_type": "qwen2",
                "hidden_size": 896,
                "intermediate_size": 4864,
                "num_hidden_layers": 24,
                "num_attention_heads": 14,
                "num_key_value_heads": 2,
                "max_window_layers": 21,
                "sliding_window": 32768,
                "use_sliding_window": False,
                "vocab_size": 151936,
                "max_position_embeddings": 32768,
                "tie_word_embeddings": True,
            },
            494_032_768,
        ),
        Preset(
            "Gemma-2-9B",
            {
                "architectures": ["Gemma2ForCausalLM"],
                "model_type": "gemma2",
                "hidden_size": 3584,
                "intermediate_size": 14336,
                "num_hidden_layers": 42,
                "num_attention_heads": 16,
                "num_key_value_heads": 8,
                "head_dim": 256,
                "sliding_window": 4096,
                "query_pre_attn_scalar": 256,
                "vocab_size": 256000,
                "max_position_embeddings": 8192,
            },
            9_241_705_984,
            "local (4096) and global layers alternate",
        ),
        Preset(
            "Gemma-3-27B", GEMMA3_27B, 27_432_406_640, "5 local (1024) : 1 global layers; multimodal config"
        ),
        Preset(
            "Gemma-3-1B",
            {
                "architectures": ["Gemma3ForCausalLM"],
                "model_type": "gemma3_text",
                "hidden_size": 1152,
                "intermediate_size": 6912,
                "num_hidden_layers": 26,
                "num_attention_heads": 4,
                "num_key_value_heads": 1,
                "head_dim": 256,
                "sliding_window": 512,
                "sliding_window_pattern": 6,
                "query_pre_attn_scalar": 256,
                "vocab_size": 262144,
                "max_position_embeddings": 32768,
            },
            999_885_952,
        ),
        Preset(
            "Phi-3-mini-4k",
            {
                "architectures": ["Phi3ForCausalLM"],
                "model_type": "phi3",
                "hidden_size": 3072,
                "intermediate_size": 8192,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 32,
                "sliding_window": 2047,
                "vocab_size": 32064,
                "max_position_embeddings": 4096,
                "tie_word_embeddings": False,
            },
            3_821_079_552,
        ),
        Preset("DeepSeek-V3", DEEPSEEK_V3, 671_026_419_200, "MLA: a 576-value latent per layer and token"),
        Preset(
            "GPT-2",
            {
                "architectures": ["GPT2LMHeadModel"],
                "model_type": "gpt2",
                "n_layer": 12,
                "n_head": 12,
                "n_embd": 768,
                "n_positions": 1024,
                "vocab_size": 50257,
            },
            124_439_808,
        ),
        Preset(
            "Falcon-7B",
            {
                "architectures": ["FalconForCausalLM"],
                "model_type": "falcon",
                "hidden_size": 4544,
                "num_attention_heads": 71,
                "num_hidden_layers": 32,
                "multi_query": True,
                "new_decoder_architecture": False,
                "vocab_size": 65024,
            },
            6_921_720_704,
            "multi-query attention: one KV head",
        ),
        Preset(
            "Falcon-40B",
            {
                "architectures": ["FalconForCausalLM"],
                "model_type": "falcon",
                "hidden_size": 8192,
                "num_attention_heads": 128,
                "num_kv_heads": 8,
                "num_hidden_layers": 60,
                "new_decoder_architecture": True,
                "vocab_size": 65024,
            },
            41_303_215_104,
            "8 KV groups; transformers caches K/V for all 128 heads",
        ),
        Preset(
            "SmolLM2-135M",
            _llama(576, 30, 9, 3, 1536, 49152, tie_word_embeddings=True, max_position_embeddings=8192),
            134_515_008,
        ),
        Preset(
            "SmolLM2-1.7B",
            _llama(2048, 24, 32, 32, 8192, 49152, tie_word_embeddings=True, max_position_embeddings=8192),
            1_711_376_384,
        ),
    )
}

# Models drawn together on the "KV bytes vs context" plot: dense GQA, windows, alternating windows, MLA.
COMPARISON_MODELS = ("Llama-3.1-8B", "Mistral-7B-v0.1", "Gemma-2-9B", "Gemma-3-27B", "DeepSeek-V3")
