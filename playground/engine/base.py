"""The engine interface: what every feature may ask of a model, in-process or remote.

Chat, Step by step, Beam search, the KV tab and the "Under the hood" views reach the model
only through an `Engine`. A sequence is named by a key; the engine keeps its KV cache
between calls (in-process) or relies on the server's prefix cache (remote), so a call whose
ids share a prefix with that key's previous ids computes only the rest.

Scores rows are (n, vocab) float32 tensors: raw logits when `capabilities.full_vocab`, else
the log-probs of the engine's top-N with -inf for every token it did not return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from playground.engine.control import Control
from playground.engine.plans import DecodePlan, Progress
from playground.engine.protocols import Probes, ScheduleLog, ServerKV
from playground.engine.records import TokenRecord
from playground.kv.geometry import ModelDims
from playground.messages import Message

__all__ = ["Capabilities", "DecodePlan", "Engine", "Progress"]


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do; `reasons` says in one line why a missing capability is missing."""

    full_vocab: bool  # scores cover the whole vocabulary (else only the top `top_n`)
    top_n: int  # how many candidates per position the engine returns
    attentions: bool  # attention weights (the attention view)
    hidden_states: bool  # per-layer hidden states (the logit lens, early exit)
    cache_bytes: bool  # the real KV cache can be built and its bytes measured
    score: bool  # log-probs of every token of a given text (prompt scoring)
    batched: bool  # many sequences in one forward (beams, the batching view)
    # direct, timed forwards of the model (engine/probes.py): cache on/off, prefill vs decode,
    # speculative drafting and verifying, padded batches; a remote server hides these
    probes: bool = False
    reasons: dict[str, str] = field(default_factory=dict)
    # One line per view on where the numbers come from, for engines that differ from the in-process
    # one (empty for it). Keys: "engine" (which server, how tested), "distribution" (top-N only: the
    # tail is unknown and how the sampling stages were applied), "chat" (which numbers the server
    # computed), "score" (how given tokens are scored), "beam" (how the search runs).
    notes: dict[str, str] = field(default_factory=dict)

    def why_not(self, capability: str) -> str:
        """Why a capability is missing: the engine's own reason (a Message), else a general one."""
        general = Message(
            "engine.error.unsupported",
            "this engine does not support {capability}",
            capability=capability.replace("_", " "),
        )
        return self.reasons.get(capability, general)


@runtime_checkable
class Engine(Protocol):
    """One model behind every feature (see the module docstring). Everything the features and the
    UI ask of an engine is declared here; what an engine lacks is None, with the reason in
    `capabilities`."""

    name: str
    tokenizer: Any
    kind: str  # "transformers", "llama.cpp", "vllm" or "sglang"
    url: str | None  # a serving engine's base URL (None: the model runs in this process)
    source: str  # where the model came from ("embedded", "cache", "hub", a path, the URL)
    load_seconds: float  # loading (or connecting) took this long
    config: Any  # the model's transformers config (None when a server's is not known here)
    dtype: torch.dtype | None  # the weights' dtype (None: a server's own format, not known here)
    num_parameters: int | None  # counted on the loaded weights (None: not known here)
    dims: ModelDims | None  # layers, heads, sizes (kv/geometry.py; None without a config)
    probes: Probes | None  # the lessons' direct forwards (engine/protocols.py; None: not in this process)
    tested_live: bool  # the adapter was tested against a live engine (always True in process)
    schedule: ScheduleLog | None  # the running batch's schedule (continuous batching), or None
    quantization: str | None  # the weights format served (--quantize), None: as loaded (or a server's own)
    quantization_line: str  # its header line ("" when none)

    @property
    def concurrency(self) -> int | None:
        """Requests the engine serves at once (a running batch's places); None: as settings say."""
        ...

    @property
    def context_length(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_token_ids(self) -> tuple[int, ...]: ...

    @property
    def pad_token_id(self) -> int: ...

    @property
    def has_chat_template(self) -> bool: ...

    @property
    def capabilities(self) -> Capabilities: ...

    def describe(self) -> str: ...

    def describe_decode(self) -> str | None:
        """One line on how tokens are decoded (static cache, CUDA graphs), or None (a server's own)."""
        ...

    def device_summary(self) -> str:
        """Where the model runs: "cpu", "cuda", "cuda:0 (20 modules), cpu (10 modules)", or the engine."""
        ...

    def measure_cache(self, seq_len: int, batch_size: int = 1, seed: int = 0) -> tuple[list[int], str]:
        """Fill a real KV cache of (batch, seq_len) tokens: bytes per layer and their dtype (in
        process only; a serving engine raises PlaygroundError with the reason)."""
        ...

    def kv_figures(self) -> ServerKV | None:
        """A serving engine's own KV capacity and usage (None in process, or when not reported)."""
        ...

    def sequence_ids(self, key: str) -> list[int]:
        """The ids key's sequence covers now ([] when absent)."""
        ...

    def prefill(
        self, ids: Sequence[int], *, key: str | None = None, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        """Start key's sequence as ids (None: keep nothing); scores after the last `last` ids."""
        ...

    def extend(
        self, key: str, new_ids: Sequence[int], *, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        """Append ids to key's sequence; scores (last, vocab) after each of its last `last` ids."""
        ...

    def sync(
        self, key: str, ids: Sequence[int], *, last: int = 1, control: Control | None = None
    ) -> torch.Tensor:
        """Make key's sequence exactly ids, keeping the common prefix (crop + extend in one)."""
        ...

    def crop(self, key: str, length: int) -> None:
        """Cut key's sequence to its first `length` ids."""
        ...

    def fork(self, key: str, new_key: str) -> None:
        """A second sequence starting as a copy of key's (its cache copied, not shared)."""
        ...

    def release(self, key: str) -> None:
        """Forget key's sequence and free its cache."""
        ...

    def beam_start(
        self, ids: Sequence[int], num_beams: int, control: Control | None = None
    ) -> tuple[Any, torch.Tensor]:
        """num_beams copies of ids in one batch; returns (batch, scores (num_beams, vocab))."""
        ...

    def beam_step(self, batch: Any, reorder: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        """Reorder the batch's rows (row i <- reorder[i]), append token_ids (N,); scores (N, vocab)."""
        ...

    def generation_processors(
        self, prompt_ids: Sequence[int], **generate_kwargs: Any
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The processors `generate` would apply with these settings (beam search parity)."""
        ...

    def score(self, ids: Sequence[int], start: int, control: Control | None = None) -> torch.Tensor:
        """Scores (len(ids) - start, vocab) before each of ids[start:] (prompt scoring)."""
        ...

    def stream(
        self,
        prompt_ids: Sequence[int],
        plan: DecodePlan,
        *,
        answer_prefix: Sequence[int] = (),
        key: str | None = None,
        control: Control | None = None,
    ) -> Iterator[Progress | TokenRecord]:
        """Read prompt + answer_prefix (Progress while it does), yield a record for every prefix
        token (source "given"), then generate up to plan.max_new_tokens tokens, one record each,
        stopping after an end-of-sequence token."""
        ...
