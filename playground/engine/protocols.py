"""What callers may use of the engine's parts, declared as protocols that name no implementation class
(the way transformers' GenerationMixin declares what a model provides). engine/base.py's `Engine`
points to these; engine/probes.py and engine/batcher.py implement them.

- `Probes` (`engine.probes`): the "Under the hood" lessons' direct, timed forwards in this process:
  sequences with their own KV cache on the model or a twin of it, padded batches, attention weights,
  per-layer logits, and a batch scheduler the lesson steps by hand.
- `ScheduleLog` (`engine.schedule`): the running batch's schedule as views read it.
- `ServerKV` (`engine.kv_figures()`): a serving engine's own KV-cache figures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from playground.engine.control import Control
from playground.engine.schedule import Iteration, Job


@dataclass(frozen=True)
class ModelShape:
    """What the cost estimates need to know about the model."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    # weights multiplied per token: every Linear, the head included (not the embedding lookup)
    matmul_params: int
    head_params: int  # of which the LM head (computed for kept rows only)
    weight_bytes: int  # bytes of every weight (read once per forward)
    element_bytes: int  # bytes per value in the model's dtype (activations, KV cache)


@dataclass
class ServerKV:
    """The engine's own KV-cache figures (from its metrics or server info)."""

    capacity_tokens: int  # tokens the KV cache can hold across all sequences
    used_tokens: int | None  # tokens it holds now (None: not reported)
    usage: float | None  # fraction in use, 0..1 (None: not reported)
    block_size: int | None  # tokens per block (paged engines)
    num_blocks: int | None
    cache_dtype: str | None  # as the engine names it ("auto" = the model's dtype)
    source: str  # where the figures came from, for the UI ("vllm:cache_config_info", ...)
    memory_bytes: int | None = None  # the KV pool's bytes as the engine reports them (per GPU), if it does


class ProbeSequence(Protocol):
    """One sequence with its own KV cache, outside the engine's store: a lesson times its forwards."""

    @property
    def ids(self) -> list[int]: ...

    @property
    def cache(self) -> Any: ...

    @property
    def cache_bytes(self) -> int:
        """Bytes of the filled keys and values (what the KV formula predicts)."""
        ...

    last_seconds: float  # model time of the last forward

    def advance(self, target: Sequence[int], last: int = 1) -> tuple[torch.Tensor, float]:
        """Make the cache cover target; logits (last, vocab) float32 after its last `last` ids, and the
        seconds of model work."""
        ...

    def forward_raw(self, piece: Sequence[int], keep: int = 1, **options: Any) -> Any:
        """One forward of piece into the cache; transformers' own output (hidden states, say)."""
        ...

    def fork(self) -> ProbeSequence: ...

    def crop(self, length: int) -> None: ...


class ProbeBatch(Protocol):
    """Sequences decoded together in one left-padded batch (as `generate` batches)."""

    def prefill(self) -> tuple[torch.Tensor, float]:
        """Every prompt in one forward: next-token logits (batch, vocab) and seconds."""
        ...

    def step(self, tokens: Sequence[int]) -> tuple[torch.Tensor, float]:
        """One token per row: logits (batch, vocab) and seconds."""
        ...


class ReplayBatch(Protocol):
    """The engine's batch scheduler stepped by hand (the lesson replays arrivals at set iterations)."""

    log: Sequence[Iteration]

    @property
    def busy(self) -> bool:
        """Requests still running or waiting."""
        ...

    def add(self, prompt: list[int], new_tokens: int, name: str) -> Job:
        """A greedy stream of new_tokens after prompt; its records come on the job's `out` queue."""
        ...

    def step(self) -> bool:
        """One iteration (False: nothing to run)."""
        ...


class Probes(Protocol):
    """The lessons' direct forwards over the engine's model (see the module docstring)."""

    model: Any  # the engine's model (the quantization lesson makes its copies from it)

    @property
    def device(self) -> torch.device: ...

    @property
    def num_layers(self) -> int: ...

    @property
    def prefill_chunk(self) -> int: ...

    def sequence(
        self,
        control: Control | None = None,
        *,
        exit_layer: int | None = None,
        model: Any = None,
        new_cache: Callable[[], Any] | None = None,
    ) -> ProbeSequence:
        """An empty sequence with its own cache: on the model, on its first exit_layer layers (an
        early-exit draft), or on another model (a quantized copy); new_cache makes its cache."""
        ...

    def batch(self, prompts: Sequence[Sequence[int]], control: Control | None = None) -> ProbeBatch: ...

    def recompute(self, ids: Sequence[int], control: Control | None = None) -> tuple[torch.Tensor, float]:
        """All of ids read again from nothing: next-token logits (vocab,) and seconds."""
        ...

    def attentions(self, ids: Sequence[int], control: Control | None = None) -> torch.Tensor:
        """Attention weights (layers, heads, seq, seq) float32 on the CPU."""
        ...

    def layer_logits(self, ids: Sequence[int], control: Control | None = None) -> torch.Tensor:
        """The logit lens: logits (layers, vocab) for the token after ids, one row per layer."""
        ...

    def replay_batch(self, budget: int, max_jobs: int) -> ReplayBatch: ...

    def shape(self) -> ModelShape: ...

    def free_memory_bytes(self) -> int | None: ...

    def check(self, ids: Sequence[int]) -> None:
        """Refuse empty, too long or out-of-vocabulary ids with a clear message."""
        ...


class ScheduleLog(Protocol):
    """The running batch as the views read it (engine/batcher.py implements it)."""

    log: Sequence[Iteration]  # the last iterations, oldest first
    iterations: int  # iterations run so far
    max_jobs: int  # requests in the batch at once

    @property
    def budget(self) -> int: ...

    @property
    def decoding_budget(self) -> int: ...
