"""Direct forwards for the "Under the hood" views: what chat and the step tab never need.

The views measure and look inside the model: attention weights (an eager-attention twin),
each layer's hidden state through the final norm and the head (logit lens), a sequence with
its own KV cache on any model (the engine's, a first-k-layers twin for early-exit drafts, a
draft engine's), a forward with no cache at all (recomputation), and a left-padded batch
with an attention mask (batching).

A twin shares every weight tensor of the engine's model (nothing is copied) but has its own
module tree and config. So the eager twin switches attention for the attention view alone:
the engine's model keeps its fast attention (SDPA, or what the GPU path compiles), and no
other request ever sees a changed config. Every forward goes through the engine's Forwarder
(engine/forward.py): it holds the lock for one chunk or one step, and checks the request's
Control between them (Stop acts within a step).

    probes = engine.probes                   # None on a remote engine
    maps = probes.attentions(ids)            # (layers, heads, seq, seq)
    seq = probes.sequence(exit_layer=8)      # a cached sequence on the first 8 layers
    rows, seconds = seq.advance(ids, last=1)
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from playground.engine.cache import filled_layer_bytes, new_cache
from playground.engine.control import Control, holding, run_to_end
from playground.engine.forward import Forwarder, eager_logits, keep_rows
from playground.engine.kv_store import CacheEntry
from playground.errors import PlaygroundError

if TYPE_CHECKING:
    from playground.engine.local import LocalEngine

FINAL_NORM_NAMES = ("norm", "final_layernorm", "ln_f", "final_layer_norm", "final_norm")
MAX_TWINS = 5  # eager, ragged + a few early-exit depths; each is module objects only (weights shared)


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


class Probes:
    """The lessons' forwards over one LocalEngine (see the module docstring): `engine.probes`."""

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine
        self.forwarder: Forwarder = engine.forwarder
        self._twins: OrderedDict[tuple[str, int], Any] = OrderedDict()
        self._twin_lock = threading.Lock()

    @property
    def model(self) -> Any:
        return self.engine.model

    @property
    def device(self) -> torch.device:
        return self.engine.device

    @property
    def num_layers(self) -> int:
        return self.engine.dims.layers

    # --- sequences and batches ------------------------------------------------------------

    def sequence(self, exit_layer: int | None = None, control: Control | None = None) -> ProbeSequence:
        """An empty sequence with its own KV cache: on the whole model, or (exit_layer=k) on its
        first k layers followed by the final norm and the head (an early-exit draft)."""
        model = self.model if exit_layer is None else self.early_exit_twin(exit_layer)
        return ProbeSequence(self, model, control)

    def batch(self, prompts: Sequence[Sequence[int]], control: Control | None = None) -> ProbeBatch:
        """Several sequences decoded together in one left-padded batch (see ProbeBatch)."""
        return ProbeBatch(self, [list(p) for p in prompts], control)

    # --- one-off forwards -------------------------------------------------------------------

    def recompute(self, ids: Sequence[int], control: Control | None = None) -> tuple[torch.Tensor, float]:
        """All of ids read again from nothing (what every step costs without a KV cache): the
        next-token logits (vocab,) float32 and the seconds of model work. Read in the engine's
        prefill chunks, as a prompt is, so other users and Stop get a turn between chunks; the
        keys and values built on the way are thrown away afterwards."""
        rows, seconds = self.sequence(control=control).advance(ids)
        return rows[-1], seconds

    def attentions(self, ids: Sequence[int], control: Control | None = None) -> torch.Tensor:
        """Attention weights (layers, heads, seq, seq) float32 on the CPU, from an eager-attention
        twin of the model (exactly what transformers' eager output_attentions returns)."""
        self.check(ids)
        twin = self.eager_twin()

        def read() -> torch.Tensor:
            out = twin(
                input_ids=self.tensor([list(ids)]),
                use_cache=False,
                output_attentions=True,
                **keep_rows(twin, 1),
            )
            if not out.attentions or any(a is None for a in out.attentions):
                raise PlaygroundError(
                    f"{self.engine.name} returned no attention weights, even with eager attention."
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
        sequence = self.sequence(control=control)
        if len(ids) > 1:
            sequence.advance(list(ids[:-1]))
        out = sequence.forward_raw([ids[-1]], output_hidden_states=True)
        hidden = out.hidden_states  # (layers + 1) x (1, 1, hidden)
        if hidden is None or len(hidden) != self.num_layers + 1:
            raise PlaygroundError(f"{self.engine.name} did not return one hidden state per layer.")
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
            f"Cannot find the final norm of {type(self.model).__name__}: no logit lens for it."
        )

    # --- twins -----------------------------------------------------------------------------

    def eager_twin(self) -> Any:
        """The model with eager attention (returns weights), sharing the engine's weights."""
        return self._twin(("eager", 0), lambda twin: twin.set_attn_implementation("eager"))

    def ragged_twin(self) -> Any:
        """The model with the running batch's attention (engine/ragged.py), sharing its weights."""
        from playground.engine.ragged import IMPLEMENTATION

        return self._twin(("ragged", 0), lambda twin: twin.set_attn_implementation(IMPLEMENTATION))

    def early_exit_twin(self, exit_layer: int) -> Any:
        """The model cut after its first exit_layer decoder layers; the final norm and the head
        follow as usual (weights shared)."""
        total = self.num_layers
        if isinstance(exit_layer, bool) or not isinstance(exit_layer, int) or not 1 <= exit_layer < total:
            raise PlaygroundError(
                f"Early exit needs k between 1 and {total - 1} layers (the model has {total}; k = {total} "
                f"would be the model itself), got {exit_layer!r}."
            )
        return self._twin(("exit", exit_layer), lambda twin: _cut_layers(twin, exit_layer))

    def _twin(self, key: tuple[str, int], adjust: Callable[[Any], None]) -> Any:
        with self._twin_lock:
            twin = self._twins.get(key)
            if twin is None:
                twin = shared_weights_copy(self.model)
                adjust(twin)
                self._twins[key] = twin
                while len(self._twins) > MAX_TWINS:
                    self._twins.popitem(last=False)
            self._twins.move_to_end(key)
            return twin

    # --- what the model is, what memory is left ---------------------------------------------

    def shape(self) -> ModelShape:
        model, dims = self.model, self.engine.dims
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
            element_bytes=torch.finfo(self.engine.dtype).bits // 8,
        )

    def free_memory_bytes(self) -> int | None:
        """Memory free for new tensors on the model's device (None when it cannot be told)."""
        return self.forwarder.free_memory_bytes()

    def tensor(self, rows: list[list[int]]) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def check(self, ids: Sequence[int]) -> None:
        self.engine.check_ids(list(ids))


class ProbeSequence:
    """One sequence with its own KV cache on one model (the engine's or a twin), outside the
    engine's store: the lessons time every forward of it themselves."""

    def __init__(
        self,
        probes: Probes,
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
        self.probes.engine.check_ids(target, last)
        self.entry.logits.clear()
        advance = self.probes.forwarder.advance(
            self.entry, target, last, self.control, self._piece, self.new_cache
        )
        rows, self.last_seconds = run_to_end(advance)
        return rows, self.last_seconds

    def _piece(self, cache: Any, ids: Sequence[int], keep: int) -> torch.Tensor:
        return eager_logits(self.model, cache, ids, keep)

    def forward_raw(self, piece: Sequence[int], keep: int = 1, **kwargs: Any) -> Any:
        """One forward of piece into the cache (one turn); transformers' own output."""
        probes = self.probes
        out, self.last_seconds = probes.forwarder.run(
            lambda: self.model(
                input_ids=probes.tensor([list(piece)]),
                past_key_values=self.cache,
                use_cache=True,
                **keep_rows(self.model, keep),
                **kwargs,
            ),
            self.control,
        )
        self.ids.extend(piece)
        return out

    def fork(self) -> ProbeSequence:
        """An independent copy of this sequence: the same ids, its cache copied (quantized ones too)."""
        twin = ProbeSequence(self.probes, self.model, self.control, self.new_cache)
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


class ProbeBatch:
    """Sequences decoded together: prompts left-padded to one width, an attention mask hiding the
    pads, positions counted from each prompt's own start (as `generate` batches)."""

    def __init__(self, probes: Probes, prompts: list[list[int]], control: Control | None = None) -> None:
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
        pad = max(self.probes.engine.pad_token_id, 0)
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
                f"A batch step takes one token per row ({len(self.prompts)}), got {len(tokens)}."
            )
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        return self._forward(self.probes.tensor([[t] for t in tokens]), self.positions + 1)

    def _forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, float]:
        model = self.probes.model

        def call() -> torch.Tensor:
            out = model(
                input_ids=input_ids,
                attention_mask=self.mask,
                position_ids=positions,
                past_key_values=self.cache,
                use_cache=True,
                **keep_rows(model, 1),
            )
            return out.logits[:, -1].float()  # (batch, vocab)

        rows, seconds = self.probes.forwarder.run(call, self.control)
        self.positions = positions[:, -1:]
        return rows, seconds


# --- helpers -------------------------------------------------------------------------------------


def shared_weights_copy(model: Any) -> Any:
    """A copy of the model's module tree and config whose parameters and buffers ARE the
    original's tensors (deepcopy with a memo that maps each tensor to itself)."""
    memo: dict[int, Any] = {id(t): t for t in (*model.parameters(), *model.buffers())}
    try:
        return copy.deepcopy(model, memo)
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise PlaygroundError(f"Cannot make a weight-sharing copy of {type(model).__name__}: {exc}") from None


def _decoder(model: Any) -> Any:
    """The decoder stack (LlamaModel inside LlamaForCausalLM, and the like)."""
    getter = getattr(model, "get_decoder", None)
    try:
        decoder = getter() if getter is not None else None
    except (AttributeError, ValueError, NotImplementedError):
        decoder = None
    return decoder if decoder is not None else getattr(model, "base_model", model)


def _cut_layers(twin: Any, keep: int) -> None:
    """Keep the first `keep` decoder layers of a twin (its config says so too, for its cache)."""
    text = twin.config.get_text_config()
    total = int(text.num_hidden_layers)
    parent, name, layers = _layer_list(twin, total)
    setattr(parent, name, torch.nn.ModuleList(list(layers)[:keep]))
    text.num_hidden_layers = keep
    if isinstance(getattr(text, "layer_types", None), list):
        text.layer_types = text.layer_types[:keep]


def _layer_list(model: Any, total: int) -> tuple[Any, str, torch.nn.ModuleList]:
    """The ModuleList holding the decoder layers: (its parent, its attribute name, the list)."""
    for qualified, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == total and qualified:
            parent_name, _, name = qualified.rpartition(".")
            return model.get_submodule(parent_name), name, module
    raise PlaygroundError(f"Cannot find the decoder layers of {type(model).__name__}: no early exit for it.")


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
