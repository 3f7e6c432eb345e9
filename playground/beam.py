"""Beam search that records the real tree: every expansion, kept, pruned and finished.

`beam_search` runs its own beam search over the model (batched over beams, one KV cache
reordered every step) that follows transformers 5's `GenerationMixin._beam_search` step for
step: the same top-K over all beams (K = max(2, 1 + number of EOS ids) * num_beams), the same
stopping criteria (EOS, length limit), the same finished-hypothesis bookkeeping with length
penalty, the same early-stopping heuristic and the same logits processors built from the
model's generation config. Its returned `sequences` and `scores` equal `model.generate`'s
`sequences` (prompt removed) and `sequences_scores`; tests/test_beam.py proves it.

While it searches it copies a few small tensors per step to the host (the top-K contenders,
the top candidates of every beam, which contenders were kept and which entered the finished
list). `_TreeBuilder` turns those index choices into nodes: it replays no scoring, it only
names what the search chose. Drawing lives in playground/plots.py.
"""

from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache, LogitsProcessorList

from playground.errors import PlaygroundError
from playground.model import LoadedModel
from playground.stepper import encode_prompt as encode_prompt_ids
from playground.tokens import decode_ids, token_piece

MAX_BEAMS = 16
MAX_NEW_TOKENS = 64
LENGTH_PENALTY_RANGE = (-5.0, 5.0)
# Per running beam and step, how many of its best next tokens are recorded (pruned ones greyed).
DEFAULT_CANDIDATES_PER_BEAM = 3
# Fraction of the free memory a search may plan to use.
MEMORY_HEADROOM = 0.8
NEG_INF = -1.0e9  # transformers' "never pick this" offset; kept identical for parity

ProgressFn = Callable[[int, int], None]  # (steps done, steps at most)

# Fates of a node.
ROOT, KEPT, PRUNED, FINISHED = "root", "kept", "pruned", "finished"


@dataclass
class BeamNode:
    """One expanded token: a candidate continuation of a running beam at one step."""

    id: int  # index in BeamTree.nodes; 0 is the root (the prompt)
    step: int  # 1 = first generated token; 0 for the root
    parent: int  # id of the prefix this token extends; -1 for the root
    token_id: int  # -1 for the root
    text: str  # the token decoded on its own (special tokens kept)
    label: str  # the same with whitespace, bytes and specials made visible (␣ ↵ <0xNN>)
    logprob: float  # log p(token | prefix) after the model's logits processors
    cum_logprob: float  # sum of logprob along the path from the root
    score: float  # cum_logprob / step ** length_penalty (the score a finished hypothesis gets)
    fate: str  # "kept" (a running beam next step), "pruned", "finished" (entered the finished list), "root"
    ended: bool = False  # the token ends the text: an EOS token or the last allowed step
    rank: int | None = None  # 1-based rank among the returned hypotheses, if returned
    note: str = ""  # why: "outranked", "ended, not among the best", "finished, later outranked"...


@dataclass
class Hypothesis:
    """One returned sequence, in final order (rank 1 = best)."""

    rank: int
    node_id: int  # the node of its last token
    token_ids: list[int]  # generated ids, prompt excluded, no padding
    text: str  # the generated ids decoded (special tokens kept)
    score: float  # final length-normalised score (generate's sequences_scores)
    cum_logprob: float


@dataclass
class GreedyToken:
    """One token of the greedy continuation (argmax every step), for the overlay."""

    step: int
    token_id: int
    text: str
    label: str  # visible form of text (␣ ↵ <0xNN>)
    logprob: float
    cum_logprob: float
    node_id: int | None = None  # the tree node with the same prefix, when the search recorded it


@dataclass
class BeamSettings:
    """The settings the search ran with."""

    num_beams: int
    max_new_tokens: int
    length_penalty: float
    early_stopping: bool | str
    num_return_sequences: int
    chat: bool
    candidates_per_beam: int


@dataclass
class BeamTree:
    """Everything a beam search did. `sequences` EXCLUDE the prompt (see `prompt_ids`)."""

    prompt: str  # the user's text
    prompt_text: str  # the text that was tokenized (chat template applied when chat=True)
    prompt_ids: list[int]
    settings: BeamSettings
    nodes: list[BeamNode]
    hypotheses: list[Hypothesis]  # best first
    # Generated ids of the hypotheses, best first, padded with `pad_token_id` to a common
    # length exactly as generate pads: equals generate(...).sequences[:, len(prompt_ids):].
    sequences: list[list[int]]
    scores: list[float]  # equals generate(...).sequences_scores
    pad_token_id: int
    eos_token_ids: list[int]
    steps_run: int
    stop_reason: str
    seconds: float
    greedy: list[GreedyToken] | None = None
    greedy_text: str | None = None  # the greedy tokens decoded as one sequence
    _children: dict[int, list[int]] | None = field(default=None, repr=False, compare=False)

    def children(self, node_id: int) -> list[int]:
        """Ids of the nodes whose parent is node_id, best cumulative log-prob first."""
        if self._children is None:
            table: dict[int, list[int]] = {}
            for node in self.nodes[1:]:
                table.setdefault(node.parent, []).append(node.id)
            for ids in table.values():
                ids.sort(key=lambda i: -self.nodes[i].cum_logprob)
            self._children = table
        return self._children.get(node_id, [])

    def path(self, node_id: int) -> list[BeamNode]:
        """The nodes from the first generated token to node_id (root excluded)."""
        nodes = []
        while node_id > 0:
            nodes.append(self.nodes[node_id])
            node_id = self.nodes[node_id].parent
        return nodes[::-1]

    def prefix_ids(self, node_id: int) -> list[int]:
        """Prompt ids followed by the generated ids up to and including node_id."""
        return self.prompt_ids + [node.token_id for node in self.path(node_id)]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (the export format)."""
        data = asdict(self)
        data.pop("_children")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BeamTree:
        """Inverse of to_dict."""
        fields = dict(data)
        fields["settings"] = BeamSettings(**data["settings"])
        fields["nodes"] = [BeamNode(**node) for node in data["nodes"]]
        fields["hypotheses"] = [Hypothesis(**hyp) for hyp in data["hypotheses"]]
        greedy = data.get("greedy")
        fields["greedy"] = None if greedy is None else [GreedyToken(**tok) for tok in greedy]
        return cls(**fields)


# --- public entry point -------------------------------------------------------------------


def beam_search(
    lm: LoadedModel,
    prompt: str,
    num_beams: int,
    max_new_tokens: int,
    length_penalty: float = 1.0,
    early_stopping: bool | str = False,
    num_return_sequences: int | None = None,
    chat: bool = False,
    *,
    candidates_per_beam: int = DEFAULT_CANDIDATES_PER_BEAM,
    include_greedy: bool = False,
    progress: ProgressFn | None = None,
) -> BeamTree:
    """Run beam search on `prompt` and return the whole search tree.

    Same results as `lm.model.generate(num_beams=num_beams, num_return_sequences=...,
    do_sample=False, length_penalty=..., early_stopping=..., max_new_tokens=...)` on
    `tree.prompt_ids`. num_return_sequences defaults to num_beams. chat=True wraps the prompt
    in the model's chat template as one user message. include_greedy adds the greedy
    continuation (one more generation). progress(step, max_new_tokens) is called per step.
    """
    started = time.perf_counter()
    settings = check_settings(
        num_beams,
        max_new_tokens,
        length_penalty,
        early_stopping,
        num_return_sequences,
        chat,
        candidates_per_beam,
    )
    prompt_text, prompt_ids = encode_prompt(lm, prompt, chat)
    check_fits(lm, len(prompt_ids), settings)
    # The search's KV cache is private: lm.lock is taken per forward (in _Search._forward) and
    # by greedy_path around generate, so other users' requests interleave with a long search.
    with torch.inference_mode():
        run = _Search(lm, prompt_ids, settings, progress).run()
    greedy = greedy_path(lm, prompt_ids, max_new_tokens) if include_greedy else None
    tree = run.to_tree(prompt, prompt_text, prompt_ids, time.perf_counter() - started)
    if greedy is not None:
        tree.greedy = _link_greedy(tree, greedy)
        tree.greedy_text = decode_ids(lm.tokenizer, [token.token_id for token in greedy])
    return tree


# --- input checks ---------------------------------------------------------------------------


def check_settings(
    num_beams: int,
    max_new_tokens: int,
    length_penalty: float,
    early_stopping: bool | str,
    num_return_sequences: int | None,
    chat: bool,
    candidates_per_beam: int = DEFAULT_CANDIDATES_PER_BEAM,
) -> BeamSettings:
    """Validate the search settings; raise PlaygroundError naming the bad value."""
    _check_int("Beams", num_beams, 1, MAX_BEAMS)
    _check_int("Steps (max new tokens)", max_new_tokens, 1, MAX_NEW_TOKENS)
    low, high = LENGTH_PENALTY_RANGE
    if not isinstance(length_penalty, int | float) or not low <= length_penalty <= high:
        raise PlaygroundError(
            f"Length penalty must be a number from {low} to {high}, got {length_penalty!r}."
        )
    if not (isinstance(early_stopping, bool) or early_stopping == "never"):
        raise PlaygroundError(f"Early stopping must be False, True or 'never', got {early_stopping!r}.")
    returned = num_beams if num_return_sequences is None else num_return_sequences
    _check_int("Returned sequences", returned, 1, num_beams)
    _check_int("Candidates per beam", candidates_per_beam, 1, 20)
    return BeamSettings(
        int(num_beams),
        int(max_new_tokens),
        float(length_penalty),
        early_stopping,
        int(returned),
        bool(chat),
        int(candidates_per_beam),
    )


def _check_int(what: str, value: object, low: int, high: int) -> None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_whole_float = isinstance(value, float) and value.is_integer()
    if not (is_int or is_whole_float) or not low <= value <= high:  # type: ignore[operator]
        raise PlaygroundError(f"{what} must be a whole number from {low} to {high}, got {value!r}.")


def encode_prompt(lm: LoadedModel, prompt: str, chat: bool) -> tuple[str, list[int]]:
    """The text the model reads (chat template applied when chat) and its token ids, encoded
    exactly as the Step-by-step tab encodes a prompt (so an opened prefix is the same ids)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise PlaygroundError("The prompt is empty: type some text to continue.")
    ids = encode_prompt_ids(lm, prompt, bool(chat))
    return decode_ids(lm.tokenizer, ids), ids


def search_bytes(lm: LoadedModel, prompt_len: int, settings: BeamSettings) -> int:
    """Upper estimate of the memory a search needs: the KV cache of every beam (twice, as the
    reorder copies it), the prompt's attention scores at prefill and a few (beams, vocab) rows."""
    text = lm.config.get_text_config()
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    elem = torch.tensor([], dtype=lm.dtype).element_size()
    total_len = prompt_len + settings.max_new_tokens
    beams = settings.num_beams
    kv = 2 * int(text.num_hidden_layers) * kv_heads * head_dim * total_len * beams * elem
    prefill = beams * heads * prompt_len * prompt_len * 4 + beams * prompt_len * int(text.hidden_size) * 4 * 8
    rows = 8 * beams * lm.vocab_size * 4
    return 2 * kv + prefill + rows


def free_bytes(device: torch.device) -> int | None:
    """Free memory on the device (CUDA) or in the machine (CPU); None when unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_fits(lm: LoadedModel, prompt_len: int, settings: BeamSettings) -> None:
    """Reject a search longer than the context or bigger than the free memory."""
    total = prompt_len + settings.max_new_tokens
    if total > lm.context_length:
        raise PlaygroundError(
            f"The prompt ({prompt_len} tokens) plus {settings.max_new_tokens} steps is {total} tokens, "
            f"over the model's context of {lm.context_length}: shorten the prompt or take fewer steps."
        )
    needed, free = search_bytes(lm, prompt_len, settings), free_bytes(lm.device)
    if free is not None and needed > MEMORY_HEADROOM * free:
        raise PlaygroundError(
            f"This search needs about {needed / 2**20:.0f} MiB but only {free / 2**20:.0f} MiB are free on "
            f"{lm.device.type}: use fewer beams ({settings.num_beams}), fewer steps or a shorter prompt."
        )


# --- the search ------------------------------------------------------------------------------


def _eos_and_pad(lm: LoadedModel) -> tuple[list[int], int]:
    """EOS ids and the padding id as generate resolves them (generation config first)."""
    gen = lm.model.generation_config
    eos = gen.eos_token_id if gen.eos_token_id is not None else lm.config.get_text_config().eos_token_id
    if eos is None:
        eos = lm.tokenizer.eos_token_id
    eos_ids = [] if eos is None else [int(e) for e in (eos if isinstance(eos, list | tuple) else [eos])]
    pad = gen.pad_token_id
    pad = int(pad[0] if isinstance(pad, list | tuple) else pad) if pad is not None else None
    # generate: output_fill_value = pad_token_id or eos_token_id[0] (a pad id of 0 falls through too)
    fill = pad if pad else eos_ids[0] if eos_ids else (pad if pad is not None else -1)
    return eos_ids, fill


def _logits_processors(lm: LoadedModel, prompt: torch.Tensor, settings: BeamSettings) -> LogitsProcessorList:
    """The processors generate applies for these settings (repetition penalty etc. from the
    model's generation config; none for the embedded model)."""
    config = copy.deepcopy(lm.model.generation_config)
    config.update(
        do_sample=False,
        num_beams=settings.num_beams,
        length_penalty=settings.length_penalty,
        early_stopping=settings.early_stopping,
        max_new_tokens=settings.max_new_tokens,
        num_return_sequences=settings.num_return_sequences,
    )
    return lm.model._get_logits_processor(
        generation_config=config,
        input_ids_seq_length=prompt.shape[-1],
        encoder_input_ids=prompt,
        device=str(prompt.device),
        model_kwargs={},
    )


@dataclass
class _StepRecord:
    """What one search step chose, on the host. N = num_beams, K = contenders, C = candidates."""

    src_beam: list[int]  # (K,) running beam each contender extends
    token: list[int]  # (K,)
    cum: list[float]  # (K,) accumulated log-prob
    logprob: list[float]  # (K,)
    hits: list[bool]  # (K,) the token ends the text (EOS or length limit)
    next_running: list[int]  # (N,) contender index of each running beam for the next step
    merged: list[int]  # (N,) index into [finished slots (N) ; contenders (K)] kept as finished
    merged_finished: list[bool]  # (N,) the slot holds a finished hypothesis (not a -1e9 filler)
    cand_token: list[list[int]]  # (N, C) best tokens of every running beam
    cand_cum: list[list[float]]  # (N, C)
    cand_logprob: list[list[float]]  # (N, C)


class _Search:
    """Transformers' _beam_search for one prompt, recording every step (batch dimension 1)."""

    def __init__(
        self, lm: LoadedModel, prompt_ids: list[int], settings: BeamSettings, progress: ProgressFn | None
    ):
        self.lm, self.model, self.settings, self.progress = lm, lm.model, settings, progress
        self.device = lm.device
        self.prompt = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)  # (1, P)
        self.prompt_len = len(prompt_ids)
        self.max_length = self.prompt_len + settings.max_new_tokens
        self.eos_ids, self.fill = _eos_and_pad(lm)
        self.eos = torch.tensor(self.eos_ids, dtype=torch.long, device=self.device)
        n = settings.num_beams
        self.beams_to_keep = max(2, 1 + len(self.eos_ids)) * n  # K
        self.top_num_beam_mask = torch.arange(self.beams_to_keep, device=self.device) < n  # (K,)
        self.processors = _logits_processors(lm, self.prompt, settings)
        self.keep_last_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        self.records: list[_StepRecord] = []
        self.stop_reason = "length limit reached"
        self._init_state()

    def _init_state(self) -> None:
        """Running and finished beams as in generate: (1, N, max_length) ids, (1, N) scores."""
        n, dev = self.settings.num_beams, self.device
        self.running_sequences = torch.full((1, n, self.max_length), self.fill, dtype=torch.long, device=dev)
        self.running_sequences[:, :, : self.prompt_len] = self.prompt
        self.sequences = self.running_sequences.clone()
        self.running_scores = torch.zeros((1, n), dtype=torch.float, device=dev)
        self.running_scores[:, 1:] = NEG_INF  # only beam 0 is real at the first step
        self.beam_scores = torch.full((1, n), NEG_INF, dtype=torch.float, device=dev)
        self.is_sent_finished = torch.zeros((1, n), dtype=torch.bool, device=dev)
        self.heuristic_unsatisfied = torch.ones((1, 1), dtype=torch.bool, device=dev)
        self.cur_len = self.prompt_len

    def run(self) -> _SearchResult:
        """Prefill all beams (as generate does), then step until a stopping rule fires."""
        n = self.settings.num_beams
        self.cache = DynamicCache(config=self.model.config.get_text_config(decoder=True))
        positions = torch.arange(self.prompt_len, device=self.device).unsqueeze(0).expand(n, -1)
        outputs = self._forward(self.prompt.expand(n, -1), positions)
        while True:
            logits = outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32)  # (N, V)
            del outputs
            if self._step(logits):
                break
            ids = self.running_sequences[0, :, self.cur_len - 1 : self.cur_len]  # (N, 1)
            outputs = self._forward(ids, torch.full((n, 1), self.cur_len - 1, device=self.device))
        return _SearchResult(self)

    def _forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> Any:
        """One forward with the same inputs generate passes (no mask: no padding)."""
        kwargs: dict[str, Any] = {
            "past_key_values": self.cache,
            "position_ids": position_ids,
            "use_cache": True,
        }
        if self.keep_last_logits:
            kwargs["logits_to_keep"] = 1
        with self.lm.lock:  # per forward: the model is shared, this search's cache is not
            return self.model(input_ids=input_ids.contiguous(), return_dict=True, **kwargs)

    def _step(self, logits: torch.Tensor) -> bool:
        """One beam search step on (N, V) logits; returns True when the search is over."""
        n, cur = self.settings.num_beams, self.cur_len
        flat_running = self.running_sequences[0, :, :cur]  # (N, cur)
        log_probs = self.processors(flat_running, torch.nn.functional.log_softmax(logits, dim=-1))  # (N, V)
        accumulated = log_probs.unsqueeze(0) + self.running_scores[:, :, None]  # (1, N, V)
        vocab = accumulated.shape[-1]
        topk_log_probs, topk_indices = torch.topk(accumulated.reshape(1, -1), k=self.beams_to_keep)  # (1, K)
        src_beam, token = topk_indices // vocab, topk_indices % vocab  # (1, K)
        topk_sequences = torch.take_along_dim(
            self.running_sequences, src_beam[:, :, None], dim=1
        )  # (1, K, L)
        topk_sequences[:, :, cur] = token
        hits = self._hits_stopping_criteria(token)  # (1, K)
        next_idx = self._next_running(topk_log_probs, topk_sequences, hits)  # (1, N)
        merged = self._update_finished(topk_sequences, topk_log_probs, hits)  # (1, N)
        beam_idx = torch.take_along_dim(src_beam, next_idx, dim=1)[0]  # (N,) cache rows to keep
        self.cache.reorder_cache(beam_idx)
        self._record(log_probs, accumulated[0], topk_log_probs, src_beam, token, hits, next_idx, merged)
        self.cur_len += 1
        if self.progress is not None:
            self.progress(self.cur_len - self.prompt_len, self.settings.max_new_tokens)
        return self._is_done(hits, n)

    def _hits_stopping_criteria(self, token: torch.Tensor) -> torch.Tensor:
        """(1, K) bool: the contender ends with an EOS id or reaches max_length."""
        hits = torch.isin(token, self.eos) if self.eos.numel() else torch.zeros_like(token, dtype=torch.bool)
        if self.cur_len + 1 >= self.max_length:
            hits = torch.ones_like(hits)
        return hits

    def _next_running(
        self, topk_log_probs: torch.Tensor, topk_sequences: torch.Tensor, hits: torch.Tensor
    ) -> torch.Tensor:
        """generate's _get_running_beams_for_next_iteration; returns (1, N) contender indices."""
        running_log_probs = topk_log_probs + hits.to(torch.float32) * NEG_INF
        next_idx = torch.topk(running_log_probs, k=self.settings.num_beams)[1]
        self.running_sequences = torch.take_along_dim(topk_sequences, next_idx[:, :, None], dim=1)
        self.running_scores = torch.take_along_dim(running_log_probs, next_idx, dim=1)
        return next_idx

    def _update_finished(
        self, topk_sequences: torch.Tensor, topk_log_probs: torch.Tensor, hits: torch.Tensor
    ) -> torch.Tensor:
        """generate's _update_finished_beams; returns (1, N) indices into [finished ; contenders]."""
        s = self.settings
        just_finished = hits & self.top_num_beam_mask[None, :]  # (1, K)
        scores = topk_log_probs / ((self.cur_len + 1 - self.prompt_len) ** s.length_penalty)
        full = torch.all(self.is_sent_finished, dim=-1, keepdim=True) & (s.early_stopping is True)
        scores += full.to(torch.float32) * NEG_INF
        scores += (~self.heuristic_unsatisfied).to(torch.float32) * NEG_INF
        scores += (~just_finished) * NEG_INF
        merged_scores = torch.cat((self.beam_scores, scores), dim=1)  # (1, N + K)
        merged = torch.topk(merged_scores, k=s.num_beams)[1]  # (1, N)
        merged_sequences = torch.cat((self.sequences, topk_sequences), dim=1)
        self.sequences = torch.take_along_dim(merged_sequences, merged[:, :, None], dim=1)
        self.beam_scores = torch.take_along_dim(merged_scores, merged, dim=1)
        merged_finished = torch.cat((self.is_sent_finished, just_finished), dim=1)
        self.is_sent_finished = torch.take_along_dim(merged_finished, merged, dim=1)
        return merged

    def _is_done(self, hits: torch.Tensor, n: int) -> bool:
        """generate's _check_early_stop_heuristic + _beam_search_has_unfinished_sequences."""
        s = self.settings
        if s.early_stopping == "never" and s.length_penalty > 0.0:
            best_length = self.max_length - self.prompt_len
        else:
            best_length = self.cur_len - self.prompt_len
        best_running = self.running_scores[:, :1] / (best_length**s.length_penalty)
        worst_finished = torch.where(
            self.is_sent_finished, torch.min(self.beam_scores, dim=1, keepdim=True)[0], NEG_INF
        )
        self.heuristic_unsatisfied = self.heuristic_unsatisfied & torch.any(
            best_running > worst_finished, dim=-1, keepdim=True
        )
        all_finished = bool(torch.all(self.is_sent_finished)) and s.early_stopping is True
        for stopped, reason in (
            (bool(torch.all(hits)), "length limit reached"),
            (all_finished, f"early stopping: {n} hypotheses finished"),
            (not bool(torch.any(self.heuristic_unsatisfied)), "no running beam can beat the finished ones"),
        ):
            if stopped:
                self.stop_reason = reason
                return True
        return False

    def _record(
        self,
        log_probs: torch.Tensor,  # (N, V) after the processors
        accumulated: torch.Tensor,  # (N, V) running score + log_probs
        topk_log_probs: torch.Tensor,  # (1, K)
        src_beam: torch.Tensor,  # (1, K)
        token: torch.Tensor,  # (1, K)
        hits: torch.Tensor,  # (1, K)
        next_idx: torch.Tensor,  # (1, N)
        merged: torch.Tensor,  # (1, N)
    ) -> None:
        """Copy this step's choices to the host: K contenders, N x C per-beam candidates."""
        c = min(self.settings.candidates_per_beam, accumulated.shape[-1])
        cand_cum, cand_token = torch.topk(accumulated, k=c, dim=-1)  # (N, C)
        cand_logprob = torch.gather(log_probs, 1, cand_token)  # (N, C)
        logprob = log_probs[src_beam[0], token[0]]  # (K,)
        self.records.append(
            _StepRecord(
                src_beam[0].tolist(),
                token[0].tolist(),
                topk_log_probs[0].tolist(),
                logprob.tolist(),
                hits[0].tolist(),
                next_idx[0].tolist(),
                merged[0].tolist(),
                self.is_sent_finished[0].tolist(),
                cand_token.tolist(),
                cand_cum.tolist(),
                cand_logprob.tolist(),
            )
        )


class _SearchResult:
    """The finished search: device results moved to the host, ready to become a BeamTree."""

    def __init__(self, search: _Search):
        s = search.settings
        self.search = search
        search.cache = None  # free the KV cache before building the tree
        self.scores = search.beam_scores[0, : s.num_return_sequences].tolist()
        self.rows = search.sequences[0, : s.num_return_sequences, search.prompt_len :].tolist()  # (R, steps)

    def to_tree(self, prompt: str, prompt_text: str, prompt_ids: list[int], seconds: float) -> BeamTree:
        search, s = self.search, self.search.settings
        builder = _TreeBuilder(search.lm.tokenizer, s)
        for step, record in enumerate(search.records, start=1):
            builder.add_step(step, record)
        hypotheses = builder.hypotheses(self.scores)
        length = max(len(h.token_ids) for h in hypotheses)
        sequences = [row[:length] for row in self.rows]
        return BeamTree(
            prompt,
            prompt_text,
            prompt_ids,
            s,
            builder.nodes,
            hypotheses,
            sequences,
            self.scores,
            search.fill,
            search.eos_ids,
            len(search.records),
            search.stop_reason,
            seconds,
        )


# --- from recorded choices to nodes ----------------------------------------------------------


class _TreeBuilder:
    """Turns each step's recorded index choices into BeamNodes (no scoring is recomputed)."""

    def __init__(self, tokenizer: Any, settings: BeamSettings):
        self.tokenizer, self.settings = tokenizer, settings
        self.nodes = [BeamNode(0, 0, -1, -1, "", "prompt", 0.0, 0.0, 0.0, ROOT)]
        n = settings.num_beams
        self.running: list[int | None] = [0] + [None] * (n - 1)  # node of each running beam slot
        self.finished: list[int | None] = [None] * n  # node of each finished slot

    def _new_node(self, step: int, parent: int, token: int, logprob: float, cum: float) -> int:
        piece = token_piece(self.tokenizer, token)
        score = cum / (step**self.settings.length_penalty)
        node = BeamNode(
            len(self.nodes), step, parent, token, piece.text, piece.visible, logprob, cum, score, PRUNED
        )
        node.note = "outranked"
        self.nodes.append(node)
        return node.id

    def add_step(self, step: int, rec: _StepRecord) -> None:
        contenders: dict[tuple[int, int], int] = {}
        ids: list[int | None] = []
        for k, (beam, token) in enumerate(zip(rec.src_beam, rec.token, strict=True)):
            parent = self.running[beam]
            node_id = (
                None if parent is None else self._new_node(step, parent, token, rec.logprob[k], rec.cum[k])
            )
            if node_id is not None:
                self.nodes[node_id].ended = rec.hits[k]
                contenders[(beam, token)] = node_id
            ids.append(node_id)
        self._add_candidates(step, rec, contenders)
        self._mark_kept(rec, ids)
        self._mark_finished(rec, ids)

    def _add_candidates(self, step: int, rec: _StepRecord, seen: dict[tuple[int, int], int]) -> None:
        """The per-beam best tokens that were not contenders: pruned outright."""
        for beam, parent in enumerate(self.running):
            if parent is None:
                continue
            for token, cum, logprob in zip(
                rec.cand_token[beam], rec.cand_cum[beam], rec.cand_logprob[beam], strict=True
            ):
                if (beam, token) not in seen:
                    seen[(beam, token)] = self._new_node(step, parent, token, logprob, cum)

    def _mark_kept(self, rec: _StepRecord, ids: list[int | None]) -> None:
        running: list[int | None] = []
        for k in rec.next_running:
            node_id = ids[k] if not rec.hits[k] else None
            if node_id is not None:
                self.nodes[node_id].fate, self.nodes[node_id].note = KEPT, ""
            running.append(node_id)
        self.running = running
        for k, node_id in enumerate(ids):
            if node_id is not None and rec.hits[k] and self.nodes[node_id].fate == PRUNED:
                self.nodes[node_id].note = "ended, not among the best"

    def _mark_finished(self, rec: _StepRecord, ids: list[int | None]) -> None:
        merged_ids = self.finished + ids
        # A slot whose flag is off holds a -1e9 filler (generate keeps one there), not a hypothesis.
        new_finished = [
            merged_ids[m] if done else None for m, done in zip(rec.merged, rec.merged_finished, strict=True)
        ]
        for node_id in new_finished:
            if node_id is not None and self.nodes[node_id].fate == PRUNED:
                self.nodes[node_id].fate, self.nodes[node_id].note = FINISHED, ""
        for node_id in set(self.finished) - set(new_finished) - {None}:
            self.nodes[node_id].note = "finished, later outranked"
        self.finished = new_finished

    def hypotheses(self, scores: list[float]) -> list[Hypothesis]:
        """The returned hypotheses, best first, with their ranks set on the nodes."""
        result = []
        for rank, (node_id, score) in enumerate(zip(self.finished, scores, strict=False), start=1):
            if node_id is None:
                raise RuntimeError("beam search returned an empty hypothesis slot")  # cannot happen
            self.nodes[node_id].rank = rank
            path = _path_tokens(self.nodes, node_id)
            text = decode_ids(self.tokenizer, path)
            result.append(Hypothesis(rank, node_id, path, text, score, self.nodes[node_id].cum_logprob))
        return result


def _path_tokens(nodes: list[BeamNode], node_id: int) -> list[int]:
    tokens = []
    while node_id > 0:
        tokens.append(nodes[node_id].token_id)
        node_id = nodes[node_id].parent
    return tokens[::-1]


# --- greedy overlay -------------------------------------------------------------------------


def greedy_path(lm: LoadedModel, prompt_ids: list[int], max_new_tokens: int) -> list[GreedyToken]:
    """The greedy continuation (argmax each step, stops at EOS) with its log-probs, via generate."""
    prompt = torch.tensor([prompt_ids], dtype=torch.long, device=lm.device)
    eos_ids, fill = _eos_and_pad(lm)
    with lm.lock, torch.inference_mode():
        out = lm.model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            do_sample=False,
            num_beams=1,
            max_new_tokens=max_new_tokens,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=fill,
        )
    tokens, cum = [], 0.0
    for step, scores in enumerate(out.scores, start=1):
        token = int(out.sequences[0, len(prompt_ids) + step - 1])
        logprob = float(torch.log_softmax(scores[0].float(), dim=-1)[token])
        cum += logprob
        piece = token_piece(lm.tokenizer, token)
        tokens.append(GreedyToken(step, token, piece.text, piece.visible, logprob, cum))
        if token in eos_ids:
            break
    return tokens


def _link_greedy(tree: BeamTree, greedy: list[GreedyToken]) -> list[GreedyToken]:
    """Attach each greedy token to the tree node with the same prefix, while there is one."""
    node_id: int | None = 0
    for token in greedy:
        match = None
        if node_id is not None:
            match = next(
                (c for c in tree.children(node_id) if tree.nodes[c].token_id == token.token_id), None
            )
        token.node_id = match
        node_id = match
    return greedy


# --- labels ------------------------------------------------------------------------------------


def describe_node(node: BeamNode) -> str:
    """One line for lists: id, step, token, score, fate (and rank)."""
    if node.fate == ROOT:
        return "#0 · the prompt"
    rank = f" · rank {node.rank}" if node.rank else ""
    return f"#{node.id} · step {node.step} · {node.label} · score {node.score:.3f} · {node.fate}{rank}"
