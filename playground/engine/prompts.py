"""The one way prompts become token ids, and the one set of ids that end a generation.

Every feature (chat, step by step, beam search, the views) encodes through these functions,
so the same text gives the same ids in every tab, and a prefix opened in another tab is the
same sequence the model saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from playground.errors import PlaygroundError

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Plain text at the start of a sequence: the tokenizer's own special tokens (a BOS where the
    model expects one), or the start-of-text token alone for empty text."""
    ids = list(tokenizer(text, add_special_tokens=True).input_ids)
    if not ids and tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id]
    return ids


def encode_continuation(tokenizer: Any, text: str) -> list[int]:
    """Text appended to a sequence (forced text, a probability query): no special tokens added."""
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def encode_conversation(
    tokenizer: Any, messages: Sequence[Message], system_prompt: str | None = None
) -> list[int]:
    """A conversation through the chat template, ready for the assistant's answer.

    system_prompt None or blank: the template's own default (the model's own system prompt, if it
    has one). Without a chat template: the messages' text joined by newlines, as plain text."""
    if not has_chat_template(tokenizer):
        return encode_text(tokenizer, "\n".join(m["content"] for m in messages))
    turns = list(messages)
    if system_prompt and system_prompt.strip():
        turns = [{"role": "system", "content": system_prompt}, *turns]
    text = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def encode_prompt(tokenizer: Any, prompt: str, chat: bool) -> list[int]:
    """A one-message prompt: chat=True wraps it in the chat template as a user turn (with the
    model's default system prompt), else plain text. The Step and Beam tabs use this."""
    if not isinstance(prompt, str):
        raise PlaygroundError(
            "The prompt must be text, got {prompt!r}",
            key="prompt.error.not_text",
            prompt=prompt,
        )
    if chat:
        if not has_chat_template(tokenizer):
            raise PlaygroundError(
                "This model has no chat template: untick 'chat' to use the raw prompt.",
                key="prompt.error.no_template",
            )
        ids = encode_conversation(tokenizer, [{"role": "user", "content": prompt}])
    else:
        ids = encode_text(tokenizer, prompt)
    if not ids:
        raise PlaygroundError("The prompt is empty: type some text to continue.", key="prompt.error.empty")
    return ids


def eos_token_ids(generation_config: Any, config: Any, tokenizer: Any) -> tuple[int, ...]:
    """The ids that end a generation, resolved as `generate` resolves them: the generation
    config's, else the model config's, else the tokenizer's."""
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for source in (generation_config, text_config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if value is not None:
            values = value if isinstance(value, (list, tuple)) else [value]
            return tuple(int(v) for v in values)
    return ()


def pad_fill_id(generation_config: Any, eos_ids: Sequence[int]) -> int:
    """The id `generate` pads finished sequences with: the pad id, else the first EOS id
    (a pad id of 0 falls through to EOS, as in generate), else -1."""
    pad = getattr(generation_config, "pad_token_id", None)
    pad = int(pad[0] if isinstance(pad, (list, tuple)) else pad) if pad is not None else None
    if pad:
        return pad
    if eos_ids:
        return int(eos_ids[0])
    return pad if pad is not None else -1
