"""Readable token pieces: leading spaces, newlines, partial bytes and special tokens made visible."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from transformers import PreTrainedTokenizerBase

from playground.errors import PlaygroundError

VISIBLE_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})


@dataclass(frozen=True)
class TokenPiece:
    id: int
    text: str  # exactly what the token adds to the decoded text
    visible: str  # the same with whitespace shown (␣ ↵ ⇥), bytes as <0xNN>, specials as is
    special: bool


def token_piece(tokenizer: PreTrainedTokenizerBase, token_id: int) -> TokenPiece:
    """How one token reads on its own."""
    return _cached_piece(_TokenizerKey(tokenizer), int(token_id))


class _TokenizerKey:
    """Hashable by identity, so lru_cache can key on a tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer

    def __hash__(self) -> int:
        return id(self.tokenizer)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _TokenizerKey) and other.tokenizer is self.tokenizer


@lru_cache(maxsize=200_000)
def _cached_piece(key: _TokenizerKey, token_id: int) -> TokenPiece:
    tokenizer = key.tokenizer
    special = token_id in set(tokenizer.all_special_ids)
    text = tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if special:
        return TokenPiece(token_id, text, text, True)
    if "\ufffd" in text:  # an incomplete UTF-8 sequence: show the bytes themselves
        return TokenPiece(token_id, text, _byte_view(tokenizer, token_id), False)
    return TokenPiece(token_id, text, text.translate(VISIBLE_WHITESPACE) or "∅", False)


def _byte_view(tokenizer: PreTrainedTokenizerBase, token_id: int) -> str:
    raw = tokenizer.convert_ids_to_tokens(token_id)
    data = bytes(_BYTE_DECODER.get(char, ord("?")) for char in raw)
    return "".join(f"<0x{b:02X}>" for b in data)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level BPE alphabet: every byte maps to one printable character."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    )
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars), strict=True))


_BYTE_DECODER = {char: byte for byte, char in _bytes_to_unicode().items()}


def visible_text(text: str) -> str:
    """Whitespace made visible in any text (for forced text or labels)."""
    return text.translate(VISIBLE_WHITESPACE)


def decode_ids(tokenizer: Any, ids: Sequence[int]) -> str:
    """The text of a whole id sequence, special tokens kept, nothing cleaned up. Decode whole
    sequences, never join single-token decodes: a character split over several byte tokens
    (emoji, CJK, accents) decodes to U+FFFD one token at a time."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def stream_pieces(tokenizer: Any, ids: Sequence[int], start: int) -> list[str]:
    """The text each of ids[start:] adds, so that decode_ids(ids[:start]) + "".join(result)
    == decode_ids(ids). A token that only begins a character adds "" and the token that
    completes it adds the whole character (incremental decoding, as servers stream text)."""
    pieces: list[str] = []
    window, read = max(0, start - 6), start  # decode a few tokens back: spacing stays right
    for end in range(start + 1, len(ids) + 1):
        before = decode_ids(tokenizer, ids[window:read])
        after = decode_ids(tokenizer, ids[window:end])
        if after.endswith("\ufffd") and end < len(ids):
            pieces.append("")  # an incomplete character: wait for its last byte
            continue
        pieces.append(after[len(before) :])
        window, read = read, end
    return pieces


def check_token_id(token_id: Any, vocab_size: int) -> int:
    """token_id itself when it is an int inside the vocabulary; else a clear error."""
    if isinstance(token_id, bool) or not isinstance(token_id, int):
        raise PlaygroundError(
            f"Token id {token_id!r} is not a whole number: a token id is one of 0..{vocab_size - 1}."
        )
    if not 0 <= token_id < vocab_size:
        raise PlaygroundError(f"Token id {token_id!r} is outside the vocabulary (0..{vocab_size - 1}).")
    return token_id


def check_ids(ids: Sequence[int], last: int, context: int, vocab_size: int, checked: int = 0) -> None:
    """Clear messages for an empty or too long sequence, a bad token id (after the first `checked`
    ids, known good) or a `last` outside the sequence (every engine checks its input so)."""
    if not ids:
        raise PlaygroundError("No tokens to run: the sequence is empty.")
    if len(ids) > context:
        raise PlaygroundError(f"{len(ids)} tokens is more than the model's context of {context} tokens.")
    for token_id in ids[checked:]:
        check_token_id(token_id, vocab_size)
    if not 1 <= last <= len(ids):
        raise PlaygroundError(f"Scores asked for the last {last} of {len(ids)} tokens.")


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading token ids two sequences share (what a cache for one can keep for the other)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case (one list extends the other), at C speed
        return n
    return next((i for i in range(n) if a[i] != b[i]), n)
