"""Step-by-step generation: look at the next-token distribution, pick, undo, branch, force.

A `StepSession` holds a prompt and a tree of tokens (every token ever appended is a node;
the current path runs from the root, which stands for the prompt, to the tip). Its KV cache
lives in a `KVStore` entry: a pick runs one forward over the new token only, undo and branch
switches crop the cache back to the common prefix, and a session whose entry was evicted
rebuilds it from its ids. Every number comes from the model's own logits:

    session = StepSession(lm, "The capital of France is")
    session.candidates(5)            # top tokens, raw and after-sampling probabilities
    session.pick(session.candidates(1)[0].token_id)
    session.undo()
    session.ledger                   # chosen tokens, log-probs, entropy, perplexity so far
"""

from __future__ import annotations

import json
import math
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache

from playground.errors import PlaygroundError
from playground.model import LoadedModel
from playground.sampling import (
    SamplingSettings,
    Stage,
    choose_token,
    sampling_stages,
    seeded_generator,
    validate_settings,
)
from playground.session_store import CacheEntry, KVStore, default_kv_store
from playground.tokens import TokenPiece, decode_ids, token_piece

EXPORT_FORMAT = "llm-playground/step-session"
EXPORT_VERSION = 1
ROOT = 0  # node id of the prompt
SOURCES = ("pick", "greedy", "sample", "force")
ProgressFn = Callable[[int, int], None]  # (steps done, steps asked)


@dataclass
class Node:
    """One token in the tree, with how likely the model found it in its context."""

    id: int
    parent: int | None  # None for the root (the prompt)
    token_id: int | None  # None for the root
    source: str  # how it was chosen: prompt, pick, greedy, sample, force
    prob: float = 1.0  # raw model probability (temperature 1) given the tokens before it
    logprob: float = 0.0  # natural log of prob (log-softmax of the raw logits)
    rank: int = 1  # 1 = the model's most likely token
    entropy: float = 0.0  # entropy (nats) of the distribution it was chosen from
    sampled_prob: float | None = None  # probability after the sampling stages, when sampled
    children: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class TokenStats:
    prob: float
    logprob: float
    rank: int
    entropy: float


@dataclass(frozen=True)
class Candidate:
    """One of the most likely next tokens."""

    rank: int  # 1-based rank under the raw distribution
    token_id: int
    piece: TokenPiece  # .text as decoded, .visible with whitespace/bytes/specials shown
    prob: float  # raw model probability
    logprob: float
    sampled_prob: float  # probability after every sampling stage (0 when removed)

    @property
    def kept(self) -> bool:
        return self.sampled_prob > 0


@dataclass(frozen=True)
class LedgerEntry:
    """One generated step on the current path (the chain rule, one factor at a time)."""

    step: int  # 1-based
    node_id: int
    token_id: int
    piece: TokenPiece
    source: str
    prob: float
    logprob: float
    rank: int
    entropy: float
    cum_logprob: float  # sum of logprob up to this step = log P(tokens so far | prompt)
    perplexity: float  # exp(-cum_logprob / step)
    sampled_prob: float | None


@dataclass(frozen=True)
class TokenProbability:
    token_id: int
    piece: TokenPiece
    prob: float
    logprob: float
    rank: int
    sampled_prob: float | None  # after sampling; only for the first token of the text


@dataclass(frozen=True)
class TextProbability:
    """How likely the model finds a text as the continuation, token by token (chain rule)."""

    text: str
    tokens: list[TokenProbability]

    @property
    def logprob(self) -> float:
        return sum(t.logprob for t in self.tokens)

    @property
    def prob(self) -> float:
        return math.exp(self.logprob)


@dataclass(frozen=True)
class Branch:
    """A leaf of the tree: one continuation the user can return to."""

    node_id: int
    length: int  # generated tokens from the prompt to this leaf
    text: str  # the continuation, decoded
    current: bool  # the tip lies on this branch


def encode_prompt(lm: LoadedModel, prompt: str, chat: bool) -> list[int]:
    """Token ids of the prompt; chat=True wraps it in the chat template as a user turn."""
    tokenizer = lm.tokenizer
    if chat:
        if not lm.has_chat_template:
            raise PlaygroundError(f"{lm.name} has no chat template: untick 'chat' to use the raw prompt.")
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        ids = tokenizer(text, add_special_tokens=False).input_ids
    else:
        ids = tokenizer(prompt, add_special_tokens=False).input_ids
    if not ids and tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id]  # an empty prompt starts from the start-of-text token
    if not ids:
        raise PlaygroundError("The prompt is empty: type some text to continue.")
    return list(ids)


def token_stats(logits: torch.Tensor, token_id: int) -> TokenStats:
    """Probability, log-prob, rank and entropy of one token under raw logits (vocab,)."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # (vocab,)
    entropy = -(logprobs.exp() * logprobs).nansum()
    rank = 1 + (logits > logits[token_id]).sum()
    logprob = float(logprobs[token_id])
    return TokenStats(math.exp(logprob), logprob, int(rank), float(entropy))


class StepSession:
    """A prompt, a tree of appended tokens, and the current path through it (see module doc)."""

    def __init__(
        self,
        lm: LoadedModel,
        prompt: str,
        chat: bool = False,
        *,
        settings: SamplingSettings | Mapping[str, Any] | None = None,
        kv_store: KVStore | None = None,
    ) -> None:
        self.lm = lm
        self.prompt = prompt
        self.chat = bool(chat)
        self.prompt_ids = encode_prompt(lm, prompt, self.chat)
        if len(self.prompt_ids) > lm.context_length:
            raise PlaygroundError(
                f"The prompt has {len(self.prompt_ids)} tokens, more than the model's context "
                f"limit of {lm.context_length} tokens."
            )
        self.settings = validate_settings(settings)
        self.nodes: list[Node] = [Node(ROOT, None, None, "prompt")]
        self.path: list[int] = [ROOT]
        self.key = uuid.uuid4().hex  # this session's slot in the KV store
        self.kv_store = kv_store if kv_store is not None else default_kv_store()
        self._lock = threading.RLock()
        with self._lock:
            self._sync(ROOT)

    # --- reading ---------------------------------------------------------------------

    @property
    def tip(self) -> int:
        """Node id at the end of the current path."""
        return self.path[-1]

    @property
    def token_ids(self) -> list[int]:
        """Generated token ids on the current path (without the prompt)."""
        return [self.nodes[n].token_id for n in self.path[1:]]

    @property
    def ids(self) -> list[int]:
        """Prompt ids followed by the generated ids."""
        return self.prompt_ids + self.token_ids

    @property
    def text(self) -> str:
        """The generated continuation, decoded as one sequence."""
        return decode_ids(self.lm.tokenizer, self.token_ids)

    @contextmanager
    def locked(self) -> Iterator[StepSession]:
        """Hold this session's lock (re-entrant) so an action and the reads that follow it see
        one state: `with session.locked(): session.pick(t); render(session)`."""
        with self._lock:
            yield self

    @property
    def ledger(self) -> list[LedgerEntry]:
        """Per generated step: token, probability, log-prob, rank, entropy, running totals."""
        with self._lock:
            entries, total = [], 0.0
            for step, node_id in enumerate(self.path[1:], start=1):
                node = self.nodes[node_id]
                total += node.logprob
                entries.append(self._ledger_entry(step, node, total))
            return entries

    def _ledger_entry(self, step: int, node: Node, cum_logprob: float) -> LedgerEntry:
        return LedgerEntry(
            step=step,
            node_id=node.id,
            token_id=node.token_id,
            piece=token_piece(self.lm.tokenizer, node.token_id),
            source=node.source,
            prob=node.prob,
            logprob=node.logprob,
            rank=node.rank,
            entropy=node.entropy,
            cum_logprob=cum_logprob,
            perplexity=math.exp(-cum_logprob / step),
            sampled_prob=node.sampled_prob,
        )

    def next_logits(self) -> torch.Tensor:
        """Raw next-token logits (vocab,) float32 at the tip (cached: no forward if nothing changed)."""
        with self._lock:
            return self._sync(self.tip)

    def stages(self, settings: SamplingSettings | Mapping[str, Any] | None = None) -> list[Stage]:
        """The tip's distribution after each sampling stage: [raw, stage1, ...]."""
        settings = self._settings(settings)
        with self._lock:
            return sampling_stages(self._sync(self.tip), self.ids, settings)

    def candidates(
        self, k: int = 10, settings: SamplingSettings | Mapping[str, Any] | None = None
    ) -> list[Candidate]:
        """The k most likely next tokens (raw distribution), with after-sampling probabilities."""
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise PlaygroundError(f"The number of candidates must be an integer >= 1, got {k!r}")
        stages = self.stages(settings)
        raw, final = stages[0], stages[-1]
        top = torch.topk(raw.logits, min(k, raw.logits.numel()))
        logprobs = torch.log_softmax(raw.logits, dim=-1)
        result = []
        for token_id in top.indices.tolist():
            rank = 1 + int((raw.logits > raw.logits[token_id]).sum())
            piece = token_piece(self.lm.tokenizer, token_id)
            result.append(
                Candidate(
                    rank,
                    token_id,
                    piece,
                    float(raw.probs[token_id]),
                    float(logprobs[token_id]),
                    float(final.probs[token_id]),
                )
            )
        return result

    def probability_of(
        self, token_or_text: int | str, settings: SamplingSettings | Mapping[str, Any] | None = None
    ) -> TextProbability:
        """How likely any token id or text is as the continuation, and its rank, however far
        outside the top-k. Text of several tokens gets every token's factor (chain rule)."""
        settings = self._settings(settings)
        with self._lock:
            token_ids = self._tokens_for(token_or_text)
            self._check_room(len(token_ids) - 1)
            rows = self._peek(token_ids[:-1])  # (n - 1, vocab) logits after each of them
            tip = self._sync(self.tip)
            final = sampling_stages(tip, self.ids, settings)[-1]
            tokens = []
            for i, token_id in enumerate(token_ids):
                stats = token_stats(tip if i == 0 else rows[i - 1], token_id)
                sampled = float(final.probs[token_id]) if i == 0 else None
                piece = token_piece(self.lm.tokenizer, token_id)
                tokens.append(
                    TokenProbability(token_id, piece, stats.prob, stats.logprob, stats.rank, sampled)
                )
            text = token_or_text if isinstance(token_or_text, str) else piece.text
            return TextProbability(text, tokens)

    def branches(self) -> list[Branch]:
        """Every leaf of the tree, oldest first; `current` when the tip lies on its path."""
        with self._lock:
            result = []
            for leaf in (n for n in self.nodes if not n.children and n.id != ROOT):
                path = self._path_to(leaf.id)
                tokens = [self.nodes[n].token_id for n in path[1:]]
                text = decode_ids(self.lm.tokenizer, tokens)
                result.append(Branch(leaf.id, len(tokens), text, self.tip in path))
            return result

    # --- changing the path -------------------------------------------------------------

    def pick(self, token_id: int) -> LedgerEntry:
        """Append one token of your choice (one forward over that token only)."""
        with self._lock:
            token_id = self._check_token(token_id)
            self._check_room(1)
            self._append([token_id], "pick")
            return self.ledger[-1]

    def force(self, text: str) -> list[LedgerEntry]:
        """Append any text (tokenized on its own, possibly several tokens, one forward)."""
        with self._lock:
            if not isinstance(text, str) or not text:
                raise PlaygroundError("The text to force is empty: type the text to append.")
            token_ids = self.lm.tokenizer(text, add_special_tokens=False).input_ids
            if not token_ids:
                raise PlaygroundError(f"The text {text!r} gives no tokens.")
            self._check_room(len(token_ids))
            self._append(list(token_ids), "force")
            return self.ledger[-len(token_ids) :]

    def append_tokens(self, token_ids: Sequence[int]) -> list[LedgerEntry]:
        """Append given token ids in one forward (e.g. a beam's continuation), as forced tokens."""
        with self._lock:
            checked = [self._check_token(t) for t in token_ids]
            if not checked:
                return []
            self._check_room(len(checked))
            self._append(checked, "force")
            return self.ledger[-len(checked) :]

    def greedy(self, n: int = 1, progress: ProgressFn | None = None) -> list[LedgerEntry]:
        """Append the most likely token n times (stops after an end-of-sequence token)."""
        return self.sample_steps(n, SamplingSettings(temperature=0), None, progress, source="greedy")

    def sample(
        self, settings: SamplingSettings | Mapping[str, Any] | None = None, seed: int | None = None
    ) -> LedgerEntry:
        """Draw one token from the distribution after the sampling stages."""
        return self.sample_steps(1, settings, seed)[-1]

    def sample_steps(
        self,
        n: int,
        settings: SamplingSettings | Mapping[str, Any] | None = None,
        seed: int | None = None,
        progress: ProgressFn | None = None,
        *,
        source: str = "sample",
    ) -> list[LedgerEntry]:
        """Draw n tokens in a row from one seeded RNG (the same seed gives the same tokens as
        `torch.manual_seed(seed)` + `generate(do_sample=True)`); stops after end of sequence."""
        settings = self._settings(settings)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise PlaygroundError(f"The number of steps must be an integer >= 1, got {n!r}")
        with self._lock:
            self._check_room(n)
            generator = seeded_generator(seed, self.lm.device)
            start = len(self.path)
            for done in range(1, n + 1):
                token_id = self._sample_one(settings, generator, source)
                if progress is not None:
                    progress(done, n)
                if token_id in self.lm.eos_token_ids:
                    break
            return self.ledger[start - 1 :]

    def _sample_one(self, settings: SamplingSettings, generator: torch.Generator, source: str) -> int:
        final = sampling_stages(self._sync(self.tip), self.ids, settings)[-1]
        token_id = choose_token(final.logits.unsqueeze(0), settings, generator)
        sampled = None if source == "greedy" else float(final.probs[token_id])
        self._append([token_id], source, sampled)
        return token_id

    def undo(self, n: int = 1) -> None:
        """Go back n tokens (they stay in the tree as a branch); the cache is cropped."""
        with self._lock:
            if not isinstance(n, int) or n < 1:
                raise PlaygroundError(f"Undo needs a number of steps >= 1, got {n!r}")
            if len(self.path) - 1 < n:
                raise PlaygroundError(f"Nothing to undo: {len(self.path) - 1} generated tokens, asked {n}.")
            self.path = self.path[:-n]
            self._sync(self.tip)

    def switch_to(self, node_id: int) -> None:
        """Make node_id the tip: crop the cache to the common prefix and forward the rest."""
        with self._lock:
            if not isinstance(node_id, int) or not 0 <= node_id < len(self.nodes):
                raise PlaygroundError(
                    f"No node {node_id!r} in this session's tree (0..{len(self.nodes) - 1})."
                )
            old = self.path
            self.path = self._path_to(node_id)
            try:
                self._sync(node_id)
            except BaseException:
                self.path = old
                raise

    def release(self) -> None:
        """Free this session's cache in the store."""
        self.kv_store.drop(self.key)

    # --- internals: tree ---------------------------------------------------------------

    def _settings(self, settings: SamplingSettings | Mapping[str, Any] | None) -> SamplingSettings:
        return self.settings if settings is None else validate_settings(settings)

    def _path_to(self, node_id: int) -> list[int]:
        path = []
        current: int | None = node_id
        while current is not None:
            path.append(current)
            current = self.nodes[current].parent
        return path[::-1]

    def _ids_to(self, node_id: int) -> list[int]:
        return self.prompt_ids + [self.nodes[n].token_id for n in self._path_to(node_id)[1:]]

    def _check_token(self, token_id: Any) -> int:
        ok = isinstance(token_id, int) and not isinstance(token_id, bool)
        if not ok or not 0 <= token_id < self.lm.vocab_size:
            raise PlaygroundError(
                f"Token id {token_id!r} is outside the vocabulary (0..{self.lm.vocab_size - 1})."
            )
        return token_id

    def _check_room(self, extra: int) -> None:
        used, limit = len(self.prompt_ids) + len(self.path) - 1, self.lm.context_length
        if used + extra > limit:
            raise PlaygroundError(
                f"Context limit reached: the model reads at most {limit} tokens; this session has "
                f"{used} and {extra} more would make {used + extra}. Undo some tokens or start anew."
            )

    def _tokens_for(self, token_or_text: int | str) -> list[int]:
        if isinstance(token_or_text, str):
            if not token_or_text:
                raise PlaygroundError("Type a token or some text to look up its probability.")
            ids = list(self.lm.tokenizer(token_or_text, add_special_tokens=False).input_ids)
            if not ids:
                raise PlaygroundError(f"The text {token_or_text!r} gives no tokens.")
            return ids
        return [self._check_token(token_or_text)]

    def _child(
        self, parent: int, token_id: int, source: str, stats: TokenStats, sampled: float | None
    ) -> int:
        """The existing child of parent for token_id, or a new one."""
        for child in self.nodes[parent].children:
            if self.nodes[child].token_id == token_id:
                return child
        node = Node(len(self.nodes), parent, token_id, source, stats.prob, stats.logprob, stats.rank,
                    stats.entropy, sampled)  # fmt: skip
        self.nodes.append(node)
        self.nodes[parent].children.append(node.id)
        return node.id

    def _append(self, token_ids: list[int], source: str, sampled: float | None = None) -> None:
        """Extend the path by token_ids: one forward over them; on failure nothing changes."""
        old_path, old_count = list(self.path), len(self.nodes)
        try:
            rows = self._extend_logits(self._sync(self.tip), token_ids)  # (n + 1, vocab)
            for i, token_id in enumerate(token_ids):
                stats = token_stats(rows[i], token_id)
                self.path.append(self._child(self.tip, token_id, source, stats, sampled))
            self._remember(rows[1:])
        except BaseException:
            self._rollback(old_path, old_count)
            raise

    def _rollback(self, old_path: list[int], old_count: int) -> None:
        for node in self.nodes[old_count:]:
            self.nodes[node.parent].children.remove(node.id)
        del self.nodes[old_count:]
        self.path = old_path

    # --- internals: cache ----------------------------------------------------------------

    def _entry(self) -> CacheEntry:
        entry = self.kv_store.get(self.key)
        return entry if entry is not None else CacheEntry(cache=None)

    def _sync(self, node_id: int) -> torch.Tensor:
        """Make the cache cover the ids up to node_id; return the logits after it (vocab,).

        Remembered logits + cache already covering those ids: a crop, no forward. Otherwise
        crop to the common prefix and forward the rest (all ids after an eviction)."""
        entry, target = self._entry(), self._ids_to(node_id)
        logits = entry.logits.get(node_id)
        if logits is not None and entry.ids[: len(target)] == target:
            _crop_to(entry, len(target))
        else:
            logits = self._run(entry, target, 1)[-1]
            entry.remember_logits(node_id, logits)
        self.kv_store.put(self.key, entry)
        return logits

    def _extend_logits(self, tip_logits: torch.Tensor, token_ids: list[int]) -> torch.Tensor:
        """Logits before each new token and after the last: (n + 1, vocab); one forward."""
        entry = self._entry()
        rows = self._run(entry, self.ids + token_ids, len(token_ids))
        self.kv_store.put(self.key, entry)
        return torch.cat([tip_logits.unsqueeze(0), rows])

    def _remember(self, rows: torch.Tensor) -> None:
        """Store the logits after the last len(rows) nodes of the path."""
        entry = self._entry()
        for node_id, row in zip(self.path[-len(rows) :], rows, strict=True):
            entry.remember_logits(node_id, row)
        self.kv_store.put(self.key, entry)

    def _peek(self, token_ids: list[int]) -> torch.Tensor:
        """Logits after each of token_ids appended to the tip (n, vocab), leaving the session as is."""
        if not token_ids:
            return torch.empty(0)
        entry = self._entry()
        rows = self._run(entry, self.ids + token_ids, len(token_ids))
        _crop_to(entry, len(self.ids))
        self.kv_store.put(self.key, entry)
        return rows

    def _run(self, entry: CacheEntry, target: list[int], n_logits: int) -> torch.Tensor:
        """Forward what the cache lacks of target; logits after its last n_logits ids (n, vocab)."""
        common = _common_prefix(entry.ids, target)
        keep = min(common, len(target) - n_logits)
        if entry.cache is None or keep == 0 or not _crop_to(entry, keep):
            entry.cache, entry.ids, keep = DynamicCache(config=self.lm.config), [], 0
        logits = self._forward(entry.cache, target[keep:], n_logits)
        entry.ids = list(target)
        return logits

    def _forward(self, cache: Any, new_ids: list[int], n_logits: int) -> torch.Tensor:
        """One forward of new_ids (seq,) with the cache; returns float32 logits (n_logits, vocab)."""
        input_ids = torch.tensor([new_ids], dtype=torch.long, device=self.lm.device)  # (1, seq)
        kwargs = {"past_key_values": cache, "use_cache": True}
        with self.lm.lock, torch.inference_mode():
            try:
                out = self.lm.model(input_ids=input_ids, logits_to_keep=n_logits, **kwargs)
            except TypeError:  # a model without logits_to_keep computes them all
                out = self.lm.model(input_ids=input_ids, **kwargs)
        return out.logits[0, -n_logits:].float()  # (n_logits, vocab)

    def use_settings(self, settings: SamplingSettings | Mapping[str, Any] | None) -> SamplingSettings:
        """Make `settings` the session's own (what export writes); returns them validated."""
        checked = validate_settings(settings)
        with self._lock:
            self.settings = checked
        return checked

    # --- export / import ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Everything needed to replay the session: prompt, chat flag, tree, current tip, settings."""
        with self._lock:
            nodes = [
                {"id": n.id, "parent": n.parent, "token_id": n.token_id, "source": n.source,
                 "sampled_prob": n.sampled_prob}
                for n in self.nodes[1:]
            ]  # fmt: skip
            return {
                "format": EXPORT_FORMAT,
                "version": EXPORT_VERSION,
                "model": self.lm.name,
                "prompt": self.prompt,
                "chat": self.chat,
                "prompt_ids": list(self.prompt_ids),
                "settings": self.settings.to_dict(),
                "nodes": nodes,
                "current": self.tip,
            }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, lm: LoadedModel, data: Any, *, kv_store: KVStore | None = None) -> StepSession:
        """Replay an exported session (recomputes every probability and the cache)."""
        checked = _check_export(data)
        session = cls(lm, checked["prompt"], checked["chat"], settings=checked["settings"], kv_store=kv_store)
        if session.prompt_ids != checked["prompt_ids"]:
            raise PlaygroundError("This session was made with another tokenizer: its prompt tokens differ.")
        try:
            with session._lock:
                id_map = session._replay(checked["nodes"])
                session.switch_to(id_map[checked["current"]])
        except BaseException:
            session.release()
            raise
        return session

    @classmethod
    def from_json(cls, lm: LoadedModel, text: str, *, kv_store: KVStore | None = None) -> StepSession:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PlaygroundError(f"Not a JSON file: {exc}") from exc
        return cls.from_dict(lm, data, kv_store=kv_store)

    def _replay(self, nodes: list[dict[str, Any]]) -> dict[int, int]:
        """Rebuild the tree depth first (each parent is at most a crop away); returns the map
        from the file's node ids to this session's."""
        children: dict[int, list[dict[str, Any]]] = {}
        for node in nodes:
            children.setdefault(node["parent"], []).append(node)
        id_map = {ROOT: ROOT}
        stack = list(reversed(children.get(ROOT, [])))
        while stack:
            node = stack.pop()
            self.switch_to(id_map[node["parent"]])
            self._check_token(node["token_id"])
            self._check_room(1)
            self._append([node["token_id"]], node["source"], node["sampled_prob"])
            id_map[node["id"]] = self.tip
            stack.extend(reversed(children.get(node["id"], [])))
        return id_map


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _crop_to(entry: CacheEntry, length: int) -> bool:
    """Crop the cache to its first `length` tokens; False when this cache cannot be cropped."""
    remove = len(entry.ids) - length
    if remove <= 0 or entry.cache is None:
        return entry.cache is not None
    try:
        entry.cache.crop(-remove)  # transformers 5: a negative count removes that many tokens
    except (RuntimeError, ValueError, NotImplementedError):
        return False
    entry.ids = entry.ids[:length]
    return True


def _check_export(data: Any) -> dict[str, Any]:
    """Validate an exported session; the error says what is wrong."""

    def fail(why: str) -> PlaygroundError:
        return PlaygroundError(f"Not a valid step-by-step session file: {why}")

    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise fail(f"'format' must be {EXPORT_FORMAT!r}")
    if data.get("version") != EXPORT_VERSION:
        raise fail(f"unsupported version {data.get('version')!r} (expected {EXPORT_VERSION})")
    if not isinstance(data.get("prompt"), str) or not isinstance(data.get("chat"), bool):
        raise fail("'prompt' must be text and 'chat' true or false")
    if not isinstance(data.get("prompt_ids"), list):
        raise fail("'prompt_ids' must be a list of token ids")
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise fail("'nodes' must be a list")
    known = {ROOT}
    for node in nodes:
        _check_node(node, known, fail)
        known.add(node["id"])
    if data.get("current") not in known:
        raise fail(f"'current' node {data.get('current')!r} is not in the tree")
    return {**data, "settings": validate_settings(data.get("settings"))}


def _check_node(node: Any, known: set[int], fail: Callable[[str], PlaygroundError]) -> None:
    if not isinstance(node, dict):
        raise fail(f"a node must be an object, got {node!r}")
    for name in ("id", "parent", "token_id"):
        if not isinstance(node.get(name), int) or isinstance(node.get(name), bool):
            raise fail(f"node field {name!r} must be an integer in {node!r}")
    if node["id"] in known:
        raise fail(f"node id {node['id']} appears twice")
    if node["parent"] not in known:
        raise fail(f"node {node['id']} has parent {node['parent']}, which comes later or does not exist")
    if node.get("source") not in SOURCES:
        raise fail(f"node {node['id']} has source {node.get('source')!r}; expected one of {SOURCES}")
    sampled = node.get("sampled_prob")
    if sampled is not None and not (isinstance(sampled, (int, float)) and 0 <= sampled <= 1):
        raise fail(f"node {node['id']} has sampled_prob {sampled!r}; expected null or a probability")
