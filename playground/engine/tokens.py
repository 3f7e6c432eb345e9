"""Readable token pieces: leading spaces, newlines, partial bytes and special tokens made visible."""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from transformers import PreTrainedTokenizerBase

from playground.errors import PlaygroundError
from playground.messages import Message

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
    data = token_bytes(tokenizer, token_id)
    return "\ufffd" if data is None else "".join(f"<0x{b:02X}>" for b in data)


def token_bytes(tokenizer: Any, token_id: int) -> bytes | None:
    """The bytes a token stands for, read from the tokenizer's own vocabulary: a byte-fallback
    piece ("<0xE7>", SentencePiece), a byte-level BPE piece through GPT-2's byte alphabet ("ç"),
    else its decoded text. None when neither reading agrees with the tokenizer's own decode."""
    text = tokenizer.decode([int(token_id)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if "\ufffd" not in text:
        return text.encode()
    raw = tokenizer.convert_ids_to_tokens(int(token_id))
    if not isinstance(raw, str):
        return None
    if _BYTE_PIECES.fullmatch(raw):
        return bytes(int(raw[i + 3 : i + 5], 16) for i in range(0, len(raw), 6))
    if raw and all(char in _BYTE_DECODER for char in raw):
        data = bytes(_BYTE_DECODER[char] for char in raw)
        if data.decode("utf-8", "replace") == text:  # the same reading as the tokenizer's decoder
            return data
    return None


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
_BYTE_PIECES = re.compile(r"(?:<0x[0-9A-Fa-f]{2}>)+")  # how a piece of bytes reads (TokenPiece.visible)


def visible_text(text: str) -> str:
    """Whitespace made visible in any text (for forced text or labels)."""
    return text.translate(VISIBLE_WHITESPACE)


def decode_ids(tokenizer: Any, ids: Sequence[int]) -> str:
    """The text of a whole id sequence, special tokens kept, nothing cleaned up. Decode whole
    sequences, never join single-token decodes: a character split over several byte tokens
    (emoji, CJK, accents) decodes to U+FFFD one token at a time."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def cut_off_shown(text: str, mark: str = "…") -> str:
    """A decoded text for display: a character cut off at the end (its last bytes never
    generated, which decodes to U+FFFD) shown as `mark`."""
    stripped = text.rstrip("\ufffd")
    return stripped + mark if len(stripped) < len(text) else text


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
            "Token id {token!r} is not a whole number: a token id is one of 0..{last}.",
            key="tokens.error.not_whole",
            token=token_id,
            last=vocab_size - 1,
        )
    if not 0 <= token_id < vocab_size:
        raise PlaygroundError(
            "Token id {token!r} is outside the vocabulary (0..{last}).",
            key="tokens.error.outside",
            token=token_id,
            last=vocab_size - 1,
        )
    return token_id


def check_ids(ids: Sequence[int], last: int, context: int, vocab_size: int, checked: int = 0) -> None:
    """Clear messages for an empty or too long sequence, a bad token id (after the first `checked`
    ids, known good) or a `last` outside the sequence (every engine checks its input so)."""
    if not ids:
        raise PlaygroundError("No tokens to run: the sequence is empty.", key="tokens.error.empty")
    if len(ids) > context:
        raise PlaygroundError(
            "{tokens} tokens is more than the model's context of {context} tokens.",
            key="tokens.error.past_context",
            tokens=len(ids),
            context=context,
        )
    for token_id in ids[checked:]:
        check_token_id(token_id, vocab_size)
    if not 1 <= last <= len(ids):
        raise PlaygroundError(
            "Scores asked for the last {last} of {tokens} tokens.",
            key="tokens.error.last",
            last=last,
            tokens=len(ids),
        )


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading token ids two sequences share (what a cache for one can keep for the other)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case (one list extends the other), at C speed
        return n
    return next((i for i in range(n) if a[i] != b[i]), n)


# --- characters split over tokens ------------------------------------------------------------
# A byte-level tokenizer may cut a character's UTF-8 bytes over several tokens (美 = E7 BE 8E
# as three tokens), and a token may end one character and start the next. Reading the bytes of
# a whole sequence tells, per token, which characters it holds whole and which in part.


class PieceLike(Protocol):
    """What reading a token needs: TokenPiece and TokenRecord both have it."""

    id: int
    text: str
    visible: str
    special: bool


@dataclass(frozen=True)
class ByteSlice:
    """The bytes one token holds of a character split over tokens (or of bytes that are not
    valid UTF-8 where they stand)."""

    data: bytes  # this token's bytes of the character
    first: int  # 1-based index of data[0] in the character; 0 when not valid UTF-8
    size: int  # the character's length in bytes, as its first byte says; 0 when not valid UTF-8
    char: str | None  # the whole character once its last byte is in the sequence; None before

    @property
    def last(self) -> int:
        return self.first + len(self.data) - 1 if self.size else 0

    @property
    def valid(self) -> bool:
        return self.size > 0

    @property
    def ends(self) -> bool:
        """The character's last byte is in this token (or the bytes are not valid)."""
        return not self.valid or self.last == self.size

    @property
    def hex(self) -> str:
        return "".join(f"<0x{b:02X}>" for b in self.data)

    def describe(self) -> str:
        """For a card: 'byte 1 of 3 of 美', 'first byte of a 3-byte character' (a Message: the UI
        says it in the page's language)."""
        first, last, size = self.first, self.last, self.size
        if not self.valid:
            return Message("tokens.invalid", "{hex}: not valid UTF-8 here", hex=self.hex)
        one = len(self.data) == 1
        if self.char is not None:
            char = char_view(self.char)
            if one:
                return Message(
                    "tokens.byte_of",
                    "byte {first} of {size} of {char}",
                    first=first,
                    size=size,
                    char=char,
                )
            return Message(
                "tokens.bytes_of",
                "bytes {first}–{last} of {size} of {char}",
                first=first,
                last=last,
                size=size,
                char=char,
            )
        if first == 1 and one:
            return Message("tokens.first_byte", "first byte of a {size}-byte character", size=size)
        if one:
            return Message(
                "tokens.byte_of_a",
                "byte {first} of a {size}-byte character",
                first=first,
                size=size,
            )
        return Message(
            "tokens.bytes_of_a",
            "bytes {first}–{last} of a {size}-byte character",
            first=first,
            last=last,
            size=size,
        )

    @property
    def label(self) -> str:
        """For a chart or tree: '美 (byte 1/3)', '<0xE7> (byte 1/3)' while the character is unknown
        (a Message, like describe)."""
        if not self.valid:
            return Message("tokens.label.invalid", "{hex} (not UTF-8)", hex=self.hex)
        name = self.hex if self.char is None else char_view(self.char)
        if len(self.data) == 1:
            return Message(
                "tokens.label.byte",
                "{name} (byte {first}/{size})",
                name=name,
                first=self.first,
                size=self.size,
            )
        return Message(
            "tokens.label.bytes",
            "{name} (bytes {first}–{last}/{size})",
            name=name,
            first=self.first,
            last=self.last,
            size=self.size,
        )


def char_view(char: str) -> str:
    """A character as it can be seen: invisible ones (U+200D, a joiner) by their code point."""
    if unicodedata.category(char) in ("Cf", "Cc", "Zs", "Zl", "Zp", "Mn", "Me"):
        return f"U+{ord(char):04X}"
    return char


@dataclass(frozen=True)
class TokenText:
    """One token as it reads inside its sequence (see `token_texts`)."""

    id: int
    parts: tuple[str | ByteSlice, ...]  # whole characters (str) and slices of split ones, in order
    special: bool
    alone: str  # how the token reads on its own (TokenPiece.visible)

    @property
    def slices(self) -> list[ByteSlice]:
        return [p for p in self.parts if isinstance(p, ByteSlice)]

    @property
    def split(self) -> bool:
        """The token holds part of a character (a byte piece), not only whole characters."""
        return any(isinstance(p, ByteSlice) for p in self.parts)

    @property
    def char(self) -> str | None:
        """The character this byte piece belongs to (its first split one); None if not known."""
        return self.slices[0].char if self.split else None

    @property
    def byte_index(self) -> int | None:
        """1-based index of its first byte in that character (None: not a byte piece)."""
        return self.slices[0].first if self.split else None

    @property
    def byte_count(self) -> int | None:
        """That character's length in bytes (None: not a byte piece; 0: not valid UTF-8)."""
        return self.slices[0].size if self.split else None

    @property
    def visible(self) -> str:
        """One line for a chart, a ledger or a tree: '␣the', '美 (byte 1/3)'."""
        if not self.split:
            return self.alone
        labels = [p.label if isinstance(p, ByteSlice) else visible_text(p) for p in self.parts]
        joined = labels[0]
        for label in labels[1:]:  # as one Message, so each label is said in the page's language
            joined = Message("tokens.plus", "{before} + {after}", before=joined, after=label)
        return joined

    @property
    def candidate(self) -> str:
        """How a candidate reads: its bytes and what they are ('<0xE7> · first byte of a 3-byte
        character'); as `visible` when it is not a byte piece."""
        if not self.split:
            return self.alone
        bytes_ = "".join(p.hex if isinstance(p, ByteSlice) else visible_text(p) for p in self.parts)
        return Message("tokens.candidate", "{bytes} · {what}", bytes=bytes_, what=self.describe())

    def describe(self) -> str:
        """What the byte piece is, for a card ('byte 1 of 3 of 美'); '' for whole characters."""
        slices = [s.describe() for s in self.slices]
        if len(slices) < 2:
            return slices[0] if slices else ""
        return Message(
            "tokens.slices", "{slices}", slices=slices
        )  # joined by "; ", each said in its language

    @property
    def glyphs(self) -> str:
        """What the token completes: its whole characters and each split character it ends
        ('' for the first bytes of one; U+FFFD for bytes that are not valid UTF-8)."""
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            elif not part.valid:
                out.append("\ufffd")
            elif part.ends and part.char is not None:
                out.append(char_view(part.char))
        return "".join(out)

    @property
    def continues(self) -> bool:
        """Its last character goes on in the next token."""
        last = self.parts[-1] if self.parts else None
        return isinstance(last, ByteSlice) and not last.ends


def token_texts(tokenizer: Any, ids: Sequence[int], context: Sequence[int] = ()) -> list[TokenText]:
    """Each of ids as it reads in the sequence context + ids: its visible text and, for a byte
    piece, the character it belongs to, its byte index and the character's byte count. context:
    the ids before (a character's first bytes may be there; only the last few matter)."""
    before = list(context)[-CONTEXT_TOKENS:]
    pieces = [token_piece(tokenizer, i) for i in [*before, *ids]]
    return read_pieces(pieces)[len(before) :]


CONTEXT_TOKENS = 4  # a character has at most 4 bytes: 3 tokens before one may hold its start


def byte_pieces(tokenizer: Any, text: str) -> tuple[int, int]:
    """How text tokenizes (as a continuation): (tokens, of which pieces of a character, e.g. one of
    the 3 byte tokens of 美). A tokenizer with no tokens for a script writes it as bytes."""
    ids = list(tokenizer(text, add_special_tokens=False).input_ids)
    return len(ids), sum(read.split for read in token_texts(tokenizer, ids))


def read_pieces(pieces: Sequence[PieceLike]) -> list[TokenText]:
    """token_texts for pieces already read alone (TokenPiece, TokenRecord): no tokenizer needed,
    so recorded traces read the same way."""
    splits = split_characters([piece_bytes(p) for p in pieces])
    texts = []
    for piece, parts in zip(pieces, splits, strict=True):
        if parts is None or not any(isinstance(p, ByteSlice) for p in parts):
            parts = (piece.text,)  # whole characters: the token's own text, exactly as decoded
        texts.append(TokenText(piece.id, tuple(parts), piece.special, piece.visible))
    return texts


def read_after(context: Sequence[PieceLike], pieces: Sequence[PieceLike]) -> list[TokenText]:
    """How pieces read after context (the pieces before them: a character may start there)."""
    before = list(context[-CONTEXT_TOKENS:])
    return read_pieces([*before, *pieces])[len(before) :]


def read_next(context: Sequence[PieceLike], piece: PieceLike) -> TokenText:
    """How a candidate next token reads after context (the pieces before it)."""
    return read_after(context, [piece])[0]


def piece_bytes(piece: PieceLike) -> bytes | None:
    """The bytes of a piece read alone: a byte piece's visible form is its bytes (<0xNN>...),
    any other its text; None for a special token (it is not text)."""
    if piece.special:
        return None
    if _BYTE_PIECES.fullmatch(piece.visible):
        return bytes(int(piece.visible[i + 3 : i + 5], 16) for i in range(0, len(piece.visible), 6))
    return piece.text.encode()


def byte_groups(texts: Sequence[TokenText]) -> list[range]:
    """The tokens in runs: a byte piece with the tokens that share its characters, every other
    token alone (what a token view draws under one character)."""
    groups, start = [], 0
    for i, text in enumerate(texts):
        last = i + 1 == len(texts)
        if last or not (text.continues and _continued(texts[i + 1], text)):
            groups.append(range(start, i + 1))
            start = i + 1
    return groups


def group_text(texts: Sequence[TokenText], pending: str = "…") -> str:
    """The text of a run of tokens with each split character once; `pending` stands for a
    character whose last byte is not in the run."""
    return "".join(t.glyphs for t in texts) + (pending if texts and texts[-1].continues else "")


def _continued(text: TokenText, before: TokenText) -> bool:
    first, prev = text.parts[0] if text.parts else None, before.parts[-1]
    return isinstance(first, ByteSlice) and isinstance(prev, ByteSlice) and first.first == prev.last + 1


def split_characters(pieces: Sequence[bytes | None]) -> list[tuple[str | ByteSlice, ...] | None]:
    """For each piece's bytes (None: not text, e.g. a special token), its whole characters and its
    slices of characters split over pieces, reading the pieces' bytes as one UTF-8 stream."""
    result: list[tuple[str | ByteSlice, ...] | None] = [None] * len(pieces)
    start = 0
    while start < len(pieces):
        end = start
        while end < len(pieces) and pieces[end] is not None:
            end += 1
        if end > start:
            result[start:end] = _split_run([p or b"" for p in pieces[start:end]])
        start = end + 1
    return result


def _split_run(pieces: list[bytes]) -> list[tuple[str | ByteSlice, ...]]:
    stream = b"".join(pieces)
    units = list(utf8_units(stream))
    out, u, offset = [], 0, 0
    for piece in pieces:
        lo, hi = offset, offset + len(piece)
        parts: list[str | ByteSlice] = []
        while lo < hi and u < len(units) and units[u][0] < hi:
            start, end, size, char = units[u]
            if start >= lo and end <= hi and char is not None:
                _add_text(parts, char)
            else:
                a, b = max(start, lo), min(end, hi)
                parts.append(ByteSlice(stream[a:b], a - start + 1 if size else 0, size, char))
            if end > hi:
                break  # the character goes on in the next piece
            u += 1
        out.append(tuple(parts))
        offset = hi
    return out


def _add_text(parts: list[str | ByteSlice], text: str) -> None:
    if parts and isinstance(parts[-1], str):
        parts[-1] += text
    else:
        parts.append(text)


def utf8_units(data: bytes) -> list[tuple[int, int, int, str | None]]:
    """(start, end, size, char) for each character of data: size is the length its first byte
    announces, char None while it is cut off at the end; (start, end, 0, None) for bytes that are
    not valid UTF-8 there (the maximal valid start of a character, as decoders replace it)."""
    units, i = [], 0
    while i < len(data):
        size = _utf8_length(data[i])
        j = i + 1
        while j < min(i + size, len(data)) and 0x80 <= data[j] <= 0xBF:
            j += 1
        chunk = data[i:j]
        if size and j == i + size and _decodes(chunk, final=True):
            units.append((i, j, size, chunk.decode()))
        elif size and _decodes(chunk, final=False):
            units.append((i, j, size if j == len(data) else 0, None))  # cut off, or cut short
        else:
            j = i + 1
            units.append((i, j, 0, None))
        i = j
    return units


def _utf8_length(lead: int) -> int:
    """How many bytes a UTF-8 character starting with this byte has (0: it cannot start one)."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    return 4 if 0xF0 <= lead <= 0xF4 else 0


def _decodes(chunk: bytes, final: bool) -> bool:
    try:
        codecs.getincrementaldecoder("utf-8")().decode(chunk, final=final)
    except UnicodeDecodeError:
        return False
    return True
