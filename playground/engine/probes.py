"""Direct forwards for the "Under the hood" lessons (engine/protocols.py `Probes`): what chat and the
step tab never need.

The lessons measure and look inside the model: attention weights (an eager-attention twin), each
layer's hidden state through the final norm and the head (logit lens), a sequence with its own KV
cache on any model (the engine's, a first-k-layers twin for early-exit drafts, a quantized copy), a
forward with no cache at all (recomputation), a left-padded batch with an attention mask (batching)
and the batch scheduler stepped by hand (continuous batching). Twins share every weight of the
engine's model (engine/twins.py). Every forward is the engine's one model call
(engine/model_call.py) in a Forwarder turn: it holds the lock for one chunk or one step, and checks
the request's Control between them (Stop acts within a step).

    probes = engine.probes                   # None on a remote engine
    maps = probes.attentions(ids)            # (layers, heads, seq, seq)
    seq = probes.sequence(exit_layer=8)      # a cached sequence on the first 8 layers
    rows, seconds = seq.advance(ids, last=1)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from playground.engine.batcher import Batcher
from playground.engine.cache import filled_layer_bytes, new_cache
from playground.engine.control import Control, holding, run_to_end
from playground.engine.forward import Forwarder
from playground.engine.kv_store import CacheEntry
from playground.engine.model_call import ModelInputs, run_model, sequence_logits
from playground.engine.plans import DecodePlan
from playground.engine.protocols import ModelShape
from playground.engine.sampling import SamplingSettings
from playground.engine.schedule import Iteration, Job
from playground.engine.twins import Twins
from playground.errors import PlaygroundError
from playground.kv.geometry import ModelDims

FINAL_NORM_NAMES = ("norm", "final_layernorm", "ln_f", "final_layer_norm", "final_norm")
GREEDY = SamplingSettings(temperature=0)


class ProbeHost(Protocol):
    """What the probes need of the engine that holds the model (LocalEngine provides it)."""

    name: str
    model: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    dims: ModelDims
    forwarder: Forwarder
    twins: Twins

    @property
    def config(self) -> Any: ...

    @property
    def pad_token_id(self) -> int: ...

    @property
    def eos_token_ids(self) -> tuple[int, ...]: ...

    @property
    def context_length(self) -> int: ...

    def check_ids(self, ids: Sequence[int], last: int = 1, checked: int = 0) -> None: ...


class ModelProbes:
    """The lessons' forwards over one engine's model (see the module docstring): `engine.probes`."""

    def __init__(self, host: ProbeHost) -> None:
        self.host = host
        self.forwarder: Forwarder = host.forwarder

    @property
    def model(self) -> Any:
        return self.host.model

    @property
    def device(self) -> torch.device:
        return self.host.device

    @property
    def num_layers(self) -> int:
        return self.host.dims.layers

    @property
    def prefill_chunk(self) -> int:
        return self.forwarder.prefill_chunk

    # --- sequences and batches ------------------------------------------------------------

    def sequence(
        self,
        control: Control | None = None,
        *,
        exit_layer: int | None = None,
        model: Any = None,
        new_cache: Callable[[], Any] | None = None,
    ) -> ModelSequence:
        """An empty sequence with its own KV cache: on the whole model, on its first exit_layer layers
        followed by the final norm and the head (an early-exit draft), or on another model."""
        if exit_layer is not None:
            model = self.host.twins.early_exit(exit_layer)
        return ModelSequence(self, model if model is not None else self.model, control, new_cache)

    def batch(self, prompts: Sequence[Sequence[int]], control: Control | None = None) -> PaddedBatch:
        """Several sequences decoded together in one left-padded batch (see PaddedBatch)."""
        return PaddedBatch(self, [list(p) for p in prompts], control)

    def replay_batch(self, budget: int, max_jobs: int) -> Replay:
        """The engine's batch scheduler, unthreaded, on the batched-attention twin."""
        twin = self.host.twins.ragged()
        batcher = Batcher(
            twin, self.forwarder, self.host.tokenizer, budget=budget, max_jobs=max_jobs, threaded=False
        )
        return Replay(self.host, batcher)

    # --- one-off forwards -------------------------------------------------------------------

    def recompute(self, ids: Sequence[int], control: Control | None = None) -> tuple[torch.Tensor, float]:
        """All of ids read again from nothing (what every step costs without a KV cache): the
        next-token logits (vocab,) float32 and the seconds of model work. Read in the engine's
        prefill chunks, as a prompt is, so other users and Stop get a turn between chunks; the
        keys and values built on the way are thrown away afterwards."""
        rows, seconds = self.sequence(control).advance(ids)
        return rows[-1], seconds

    def attentions(self, ids: Sequence[int], control: Control | None = None) -> torch.Tensor:
        """Attention weights (layers, heads, seq, seq) float32 on the CPU, from an eager-attention
        twin of the model (exactly what transformers' eager output_attentions returns)."""
        self.check(ids)
        twin = self.host.twins.eager()
        inputs = ModelInputs(self.tensor([list(ids)]), options={"output_attentions": True})

        def read() -> torch.Tensor:
            out = run_model(twin, inputs)
            if not out.attentions or any(a is None for a in out.attentions):
                raise PlaygroundError(
                    "{model} returned no attention weights, even with eager attention.",
                    key="engine.error.no_attentions",
                    model=self.host.name,
                )
            return torch.stack([a[0].float() for a in out.attentions]).cpu()

        return self.forwarder.run(read, control)[0]

    def layer_logits(self, ids: Sequence[int], control: Control | None = None) -> torch.Tensor:
        """The logit lens: logits (layers, vocab) float32 for the token after ids, row i from the
        hidden state after decoder layer i + 1 through the final norm and the head.

        transformers returns num_layers + 1 hidden states (the embeddings first) and replaces the
        last one by the final norm's output, so that row is the model's own logits: the final
        norm is never applied twice. The prefix is read in cached chunks (cancellable); only the
        last token's forward keeps hidden states."""
        self.check(ids)
        sequence = self.sequence(control)
        if len(ids) > 1:
            sequence.advance(list(ids[:-1]))
        out = sequence.forward_raw([ids[-1]], output_hidden_states=True)
        hidden = out.hidden_states  # (layers + 1) x (1, 1, hidden)
        if hidden is None or len(hidden) != self.num_layers + 1:
            raise PlaygroundError(
                "{model} did not return one hidden state per layer.",
                key="engine.error.hidden_states",
                model=self.host.name,
            )
        last = out.logits[0, -1:].float()  # the model's own: its last hidden state is already normed
        if len(hidden) == 2:
            return last
        middle = torch.cat([h[0, -1:] for h in hidden[1:-1]])  # (layers - 1, hidden)
        rows, _ = self.forwarder.run(lambda: self.head(self.final_norm()(middle)).float(), control)
        return torch.cat([rows, last])

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head on normed hidden states (..., hidden) -> logits (..., vocab), with the
        model's final logit soft-capping where it has one (Gemma 2)."""
        logits = self.model.get_output_embeddings()(hidden)
        cap = getattr(self.model.config.get_text_config(), "final_logit_softcapping", None)
        return torch.tanh(logits / cap) * cap if cap else logits

    def final_norm(self) -> Any:
        """The decoder's final normalisation module (applied before the head)."""
        decoder = _decoder(self.model)
        for name in FINAL_NORM_NAMES:
            module = getattr(decoder, name, None)
            if isinstance(module, torch.nn.Module):
                return module
        raise PlaygroundError(
            "Cannot find the final norm of {model}: no logit lens for it.",
            key="engine.error.final_norm",
            model=type(self.model).__name__,
        )

    # --- what the model is, what memory is left ---------------------------------------------

    def shape(self) -> ModelShape:
        model, dims = self.model, self.host.dims
        head = model.get_output_embeddings().weight
        embed = model.get_input_embeddings().weight
        params = sum(p.numel() for p in model.parameters())
        tied = head.data_ptr() == embed.data_ptr()
        return ModelShape(
            layers=dims.layers,
            heads=dims.heads,
            kv_heads=dims.kv_heads,
            head_dim=dims.head_dim,
            hidden=dims.hidden,
            intermediate=dims.intermediate,
            vocab=int(head.shape[0]),
            matmul_params=params - embed.numel() + (head.numel() if tied else 0),
            head_params=head.numel(),
            weight_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
            element_bytes=torch.finfo(self.host.dtype).bits // 8,
        )

    def free_memory_bytes(self) -> int | None:
        """Memory free for new tensors on the model's device (None when it cannot be told)."""
        return self.forwarder.free_memory_bytes()

    def tensor(self, rows: list[list[int]]) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def check(self, ids: Sequence[int]) -> None:
        self.host.check_ids(list(ids))


class ModelSequence:
    """One sequence with its own KV cache on one model (the engine's, a twin, a copy), outside the
    engine's store: the lessons time every forward of it themselves."""

    def __init__(
        self,
        probes: ModelProbes,
        model: Any,
        control: Control | None = None,
        cache_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.probes, self.model, self.control = probes, model, control
        # a fresh cache for this sequence (a growable DynamicCache unless told: a quantized one)
        self.new_cache = cache_factory or (lambda: new_cache(model.config))
        self.entry = CacheEntry(self.new_cache())
        self.last_seconds = 0.0  # model time of the last forward (lock wait excluded)

    @property
    def ids(self) -> list[int]:
        return self.entry.ids

    @property
    def cache(self) -> Any:
        return self.entry.cache

    def advance(self, target: Sequence[int], last: int = 1) -> tuple[torch.Tensor, float]:
        """Make the cache cover target: crop to the common prefix, forward the rest in the engine's
        prefill chunks. Returns the logits (last, vocab) float32 after target's last `last` ids and
        the seconds of model work (lock waits excluded). Nothing is remembered across calls but the
        cache (a lesson times every forward it asks for)."""
        target = list(target)
        self.probes.host.check_ids(target, last)
        self.entry.logits.clear()
        advance = self.probes.forwarder.advance(
            self.entry, target, last, self.control, self._piece, self.new_cache
        )
        rows, self.last_seconds = run_to_end(advance)
        return rows, self.last_seconds

    def _piece(self, cache: Any, ids: Sequence[int], keep: int) -> torch.Tensor:
        return sequence_logits(self.model, cache, list(ids), keep)

    def forward_raw(self, piece: Sequence[int], keep: int = 1, **options: Any) -> Any:
        """One forward of piece into the cache (one turn); transformers' own output."""
        inputs = ModelInputs(self.probes.tensor([list(piece)]), cache=self.cache, keep=keep, options=options)
        out, self.last_seconds = self.probes.forwarder.run(
            lambda: run_model(self.model, inputs), self.control
        )
        self.ids.extend(piece)
        return out

    def fork(self) -> ModelSequence:
        """An independent copy of this sequence: the same ids, its cache copied (quantized ones too)."""
        twin = ModelSequence(self.probes, self.model, self.control, self.new_cache)
        with holding(self.probes.forwarder.lock, self.control):  # no forward writes it meanwhile
            twin.entry = self.entry.copy()
        return twin

    def crop(self, length: int) -> None:
        """Forget every id after the first `length` (the cache is cut, not copied)."""
        if length < len(self.ids):
            self.cache.crop(length - len(self.ids))
            del self.ids[length:]

    @property
    def cache_bytes(self) -> int:
        """Bytes of the filled keys and values (what the KV formula predicts)."""
        return sum(filled_layer_bytes(self.cache))


class PaddedBatch:
    """Sequences decoded together: prompts left-padded to one width, an attention mask hiding the
    pads, positions counted from each prompt's own start (as `generate` batches)."""

    def __init__(self, probes: ModelProbes, prompts: list[list[int]], control: Control | None = None) -> None:
        if not prompts:
            raise PlaygroundError("A batch needs at least one prompt.")
        for ids in prompts:
            probes.check(ids)
        self.probes, self.prompts, self.control = probes, prompts, control
        self.cache = new_cache(probes.model.config)
        self.mask: torch.Tensor | None = None  # (batch, width) 1 for real tokens, 0 for pads
        self.positions: torch.Tensor | None = None  # (batch, 1) position of each row's last token

    def prefill(self) -> tuple[torch.Tensor, float]:
        """All prompts in one forward: next-token logits (batch, vocab) and seconds."""
        width = max(len(p) for p in self.prompts)
        pad = max(self.probes.host.pad_token_id, 0)
        ids = [[pad] * (width - len(p)) + p for p in self.prompts]
        mask = [[0] * (width - len(p)) + [1] * len(p) for p in self.prompts]
        self.mask = self.probes.tensor(mask)
        positions = (self.mask.cumsum(-1) - 1).clamp(min=0)  # (batch, width)
        return self._forward(self.probes.tensor(ids), positions)

    def step(self, tokens: Sequence[int]) -> tuple[torch.Tensor, float]:
        """One token per row (a finished row gets a pad and its scores are ignored)."""
        if self.mask is None or self.positions is None:
            raise PlaygroundError("Prefill the batch before stepping it.")
        if len(tokens) != len(self.prompts):
            raise PlaygroundError(
                "A batch step takes one token per row ({rows}), got {got}.",
                key="engine.error.batch_step",
                rows=len(self.prompts),
                got=len(tokens),
            )
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        return self._forward(self.probes.tensor([[t] for t in tokens]), self.positions + 1)

    def _forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, float]:
        inputs = ModelInputs(input_ids, positions, self.cache, self.mask, keep=1)
        model = self.probes.model
        rows, seconds = self.probes.forwarder.run(
            lambda: run_model(model, inputs).logits[:, -1].float(), self.control
        )  # (batch, vocab)
        self.positions = positions[:, -1:]
        return rows, seconds


class Replay:
    """The engine's batch scheduler stepped by hand, greedy streams only (the continuous-batching
    lesson replays arrivals at set iterations)."""

    def __init__(self, host: ProbeHost, batcher: Batcher) -> None:
        self.host, self.batcher = host, batcher

    @property
    def log(self) -> Sequence[Iteration]:
        return self.batcher.log

    @property
    def busy(self) -> bool:
        return bool(self.batcher.running or self.batcher.waiting)

    def add(self, prompt: list[int], new_tokens: int, name: str) -> Job:
        entry = CacheEntry(new_cache(self.host.config))
        plan = DecodePlan(GREEDY, new_tokens, seed=0)
        host = self.host
        return self.batcher.stream_job(entry, prompt, plan, host.eos_token_ids, host.context_length, name)

    def step(self) -> bool:
        return self.batcher.step()


# --- helpers -------------------------------------------------------------------------------------


def _decoder(model: Any) -> Any:
    """The decoder stack (LlamaModel inside LlamaForCausalLM, and the like)."""
    getter = getattr(model, "get_decoder", None)
    try:
        decoder = getter() if getter is not None else None
    except (AttributeError, ValueError, NotImplementedError):
        decoder = None
    return decoder if decoder is not None else getattr(model, "base_model", model)


Picker = Callable[[torch.Tensor, Sequence[int]], int]  # (logits (vocab,), ids so far) -> token id


def greedy_picker(engine: Any, prompt_ids: Sequence[int]) -> Picker:
    """Greedy choice exactly as `generate(do_sample=False)` makes it: the processors the model's
    generation config asks for (none for most models), then the argmax (first index on ties)."""
    processors = engine.generation_processors(list(prompt_ids))

    def pick(row: torch.Tensor, ids: Sequence[int]) -> int:
        scores = row.reshape(1, -1)
        if len(processors):
            scores = processors(torch.tensor([list(ids)], dtype=torch.long, device=row.device), scores)
        return int(scores.argmax(dim=-1))

    return pick
