"""Shared pieces of the "Under the hood" tests: reference computations with plain transformers."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from playground.engine.loading import embedded_cache_dir
from playground.engine.prompts import encode_prompt
from playground.settings import load_settings

PARAGRAPH = (
    "The old lighthouse stood on the cliff for two hundred years. Every night its keeper climbed the "
    "spiral stairs, trimmed the wick and polished the great lens until it shone."
)
COPY_TASK = "Copy the following paragraph exactly, but change the word 'old' to 'ancient':\n\n" + PARAGRAPH


def copy_prompt(lm) -> list[int]:
    return encode_prompt(lm.tokenizer, COPY_TASK, True)


def generate_greedy(lm, ids: list[int], new_tokens: int) -> list[int]:
    """Plain transformers greedy decoding: the reference every view's greedy tokens must equal."""
    with lm.lock, torch.inference_mode():
        out = lm.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=new_tokens,
            do_sample=False,
        )
    return out[0, len(ids) :].tolist()


def eager_reference(lm):
    """The embedded model loaded again by transformers itself with eager attention."""
    directory = embedded_cache_dir(Path(load_settings().cache_dir))
    return AutoModelForCausalLM.from_pretrained(str(directory), attn_implementation="eager").eval()


def other_tokenizer() -> PreTrainedTokenizerFast:
    """A tiny word-level tokenizer: a different vocabulary from the embedded model's."""
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", bos_token="<s>", eos_token="</s>"
    )
