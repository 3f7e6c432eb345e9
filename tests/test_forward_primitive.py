"""One model call: every model forward of every tab and lesson, warm-up, a batched crowd and the static
path's preparation included, comes from engine/model_call.py's run_model, inside engine/forward.py's
Forwarder turn (locked, cancellable, guarded, timed). A global forward hook sees every module call of
every model (twins and drafts too)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import gradio as gr
import pytest
import torch
from hood_tab_helpers import request
from transformers import PreTrainedModel

from playground import kv
from playground.beam import beam_search
from playground.chat import ChatRequest, run_chat
from playground.engine import model_call
from playground.engine.batcher import BatchConfig
from playground.engine.sampling import SamplingSettings
from playground.engine.static import StaticConfig
from playground.step import StepSession
from playground.ui.hood import VIEWS, build_hood_tab
from playground.ui.hood.tab import run_handler, run_inputs, run_values
from playground.ui.state import TabStates
from playground.workspace import Workspaces
from tests.conftest import make_tiny_llama

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = SamplingSettings(temperature=0)


class Forwards:
    """Every model forward seen, by what ran it, and those outside the primitive."""

    def __init__(self) -> None:
        self.by_feature: Counter[str] = Counter()
        self.outside: list[str] = []
        self.feature = ""

    def see(self, module: torch.nn.Module, _args: object) -> None:
        if isinstance(module, PreTrainedModel):
            self.by_feature[self.feature] += 1
            if not (model_call.calling() and model_call.in_turn()):
                self.outside.append(f"{self.feature}: {type(module).__name__}")

    @contextmanager
    def running(self, feature: str) -> Iterator[None]:
        self.feature = feature
        try:
            yield
        finally:
            self.feature = ""


@contextmanager
def watched() -> Iterator[Forwards]:
    forwards = Forwards()
    handle = torch.nn.modules.module.register_module_forward_pre_hook(forwards.see)
    try:
        yield forwards
    finally:
        handle.remove()


def run_crowd(lm, users: int) -> None:
    """users chat answers at once, in the engine's running batch (their iterations hold them all)."""
    before = lm.batcher.iterations
    threads = [
        threading.Thread(target=run_chat, args=(lm, ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=4)))
        for _ in range(users)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert max(len(it.jobs) for it in lm.batcher.log if it.index >= before) > 1


def run_every_lesson(lm, forwards: Forwards) -> None:
    """Every registered lesson, through its view's Run handler, with its quick settings; then
    speculative decoding with an early-exit draft (a twin of the model)."""
    with gr.Blocks():
        widgets, tab = build_hood_tab(lm, Workspaces(lm), TabStates(), VIEWS)
    for view in VIEWS:
        with forwards.running(f"lesson {view.key}"):
            list(run_handler(tab, view)(*run_values(view, widgets, quick=True), request("hook")))
    spec = tab.views["spec"]
    inputs = dict(zip(run_inputs(spec), run_values(spec, widgets, quick=True), strict=True))
    inputs.update(spec_prompt="Say hi.", spec_method="early exit (the model's first k layers)", spec_exit=2)
    with forwards.running("lesson spec early exit"):
        list(tab.run(spec, inputs, request("hook")))


def test_every_forward_of_every_tab_and_lesson_goes_through_the_forwarder(embedded_lm):
    with watched() as forwards:
        with forwards.running("chat"):
            run_chat(embedded_lm, ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=3))
        with forwards.running("step"):
            session = StepSession(embedded_lm, "The capital of France is")
            session.pick(session.candidates(1)[0].token_id)
            session.probability_of(" Paris, the city")
            session.scores_after([session.candidates(1)[0].token_id])  # a look ahead (step/lookahead.py)
            session.undo()
        with forwards.running("beam"):
            beam_search(embedded_lm, "Hello", 2, 3, include_greedy=True)
        with forwards.running("kv measure"):
            kv.measure_vs_predicted(embedded_lm, 8)
        with forwards.running("kv measure quantized"):
            kv.measure_quantized_vs_predicted(embedded_lm, "int4", 8)
        with forwards.running("warm-up"):
            embedded_lm.warm_up()
        with forwards.running("batched crowd"):
            run_crowd(embedded_lm, 3)
        run_every_lesson(embedded_lm, forwards)
    assert forwards.outside == []
    features = [
        "chat",
        "step",
        "beam",
        "kv measure",
        "kv measure quantized",
        "warm-up",
        "batched crowd",
        *(f"lesson {v.key}" for v in VIEWS),
    ]
    assert [f for f in features if forwards.by_feature[f] == 0] == []  # each really ran the model
    assert forwards.by_feature["lesson spec early exit"] > 0


def test_the_static_path_prepares_and_decodes_inside_the_forwarder(tiny_lm):
    static = make_tiny_llama(tiny_lm.tokenizer)
    engine = type(static)(
        static.model,
        static.tokenizer,
        static.device,
        static.dtype,
        "tiny-static",
        decode="static",
        static_config=StaticConfig(capacity=64, min_bucket=16),
        batching=BatchConfig("continuous"),
    )
    with watched() as forwards:
        with forwards.running("prepare"):
            assert engine.prepare_decode() is not None and engine.decode_path == "static"
        steps = engine._static.steps
        with forwards.running("chat"):
            run_chat(engine, ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=3))
    assert forwards.outside == [] and forwards.by_feature["prepare"] > 0 and forwards.by_feature["chat"] > 0
    assert engine._static.steps > steps  # the lone answer's tokens took the static path


def test_run_model_refuses_to_run_outside_a_forwarder_turn(tiny_lm):
    inputs = model_call.sequence_inputs(tiny_lm.model, None, [5, 6, 7], 1)
    with pytest.raises(RuntimeError, match="outside a Forwarder turn"):
        model_call.run_model(tiny_lm.model, inputs)
    rows = tiny_lm.forwarder.run(lambda: model_call.run_model(tiny_lm.model, inputs).logits)[0]
    assert rows.shape == (1, 1, tiny_lm.vocab_size)


def test_a_model_call_outside_the_forwarder_is_seen(tiny_lm):
    """The hook can fail: a direct call of the model is reported."""
    with watched() as forwards, torch.inference_mode():
        tiny_lm.model(input_ids=torch.tensor([[5, 6, 7]]))
    assert forwards.outside == [": LlamaForCausalLM", ": LlamaModel"]  # the model and its decoder
