"""Chat tab: streaming answers, each token coloured by its probability, with timings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground.chat import ChatRequest, ChatUpdate, normalize_history, stream_chat
from playground.errors import PlaygroundError
from playground.model import LoadedModel
from playground.sampling import SamplingSettings
from playground.settings import Settings
from playground.tokens import token_piece
from playground.ui.common import UncheckedSlider, friendly_errors, model_event, parse_seed
from playground.ui.token_html import answer_tokens_html, legend_html, templated_stream_html

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly."


def make_request(history: list[dict[str, str]], system_prompt: str, *controls: Any) -> ChatRequest:
    """The engine request from the UI's control values (same order as the controls list)."""
    temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens, seed = controls
    if top_k is None or float(top_k) != int(top_k):
        raise PlaygroundError(f"top-k must be a whole number >= 0 (0 = off), got {top_k}")
    settings = SamplingSettings(
        temperature=float(temperature),
        top_k=int(top_k),
        top_p=float(top_p),
        min_p=float(min_p),
        repetition_penalty=float(repetition_penalty),
    )
    return ChatRequest(history, system_prompt or "", settings, int(max_new_tokens), parse_seed(seed))


def render_answer(lm: LoadedModel, update: ChatUpdate, show_template: bool) -> tuple[str, str]:
    """(token view html, statistics markdown) for one answer."""
    if show_template:
        ids = update.prompt_ids + [token.id for token in update.tokens]
        pieces = [token_piece(lm.tokenizer, i) for i in ids]
        view = templated_stream_html(pieces, len(update.prompt_ids))
    else:
        view = legend_html() + answer_tokens_html(update.tokens)
    stats = update.timings.summary() + f" · seed {update.seed}"
    if update.finished:
        stats += f" · stopped: {update.stop_reason.replace('_', ' ')}"
    notes = "".join(f"\n\n> {note}" for note in update.notes)
    return view, stats + notes


def build_chat_tab(lm: LoadedModel, settings: Settings) -> None:
    with gr.Row():
        with gr.Column(scale=3):
            chatbot = gr.Chatbot(label="Conversation", height=380, buttons=["copy"])
            with gr.Row():
                message = gr.Textbox(
                    label="Message",
                    placeholder="Ask something… (Enter to send)",
                    show_label=False,
                    scale=5,
                    autofocus=True,
                    elem_id="chat-message",
                )
                send = gr.Button("Send", variant="primary", scale=1, min_width=80, elem_id="chat-send")
            with gr.Row():
                stop = gr.Button("Stop", size="sm")
                retry = gr.Button("Retry", size="sm")
                undo = gr.Button("Undo", size="sm")
                clear = gr.Button("Clear", size="sm")
            stats = gr.Markdown(label="Statistics", elem_classes=["chat-stats"])
            token_view = gr.HTML(label="Answer tokens")
        with gr.Column(scale=1):
            controls = _build_controls(lm, settings)
    system_prompt, show_template = controls[0], controls[-1]
    sampling_controls = controls[1:-1]

    @friendly_errors
    def chat(
        message: str,
        history: list,
        system_prompt: str,
        temperature: float,
        top_k: float,
        top_p: float,
        min_p: float,
        repetition_penalty: float,
        max_new_tokens: float,
        seed: str | float | None,
        show_template: bool,
    ) -> Iterator[tuple]:
        """Append the user's message and stream the answer into the chat."""
        if not (message or "").strip():
            raise PlaygroundError("Empty message: type something to send.")
        history = [*normalize_history(history), {"role": "user", "content": message}]
        values = (temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens, seed)
        yield from _stream(history, system_prompt, values, show_template)

    @friendly_errors
    def chat_retry(
        history: list,
        system_prompt: str,
        temperature: float,
        top_k: float,
        top_p: float,
        min_p: float,
        repetition_penalty: float,
        max_new_tokens: float,
        seed: str | float | None,
        show_template: bool,
    ) -> Iterator[tuple]:
        """Answer the last user message again (its previous answer is dropped)."""
        message, earlier, *_ = undo_last(history)
        if not message:
            raise PlaygroundError("Nothing to retry yet: send a message first.")
        sampling = (temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens, seed)
        yield from chat(message, earlier, system_prompt, *sampling, show_template)

    def _stream(history: list[dict[str, str]], system: str, values: tuple, show: bool) -> Iterator[tuple]:
        request = make_request(history, system, *values)
        for update in stream_chat(lm, request, settings.max_new_tokens_limit):
            view, stats_text = render_answer(lm, update, bool(show))
            yield "", [*history, {"role": "assistant", "content": update.text}], view, stats_text

    def undo_last(history: list) -> tuple:
        """Remove the last exchange and put the user's message back in the box."""
        history = normalize_history(history)
        while history and history[-1]["role"] != "user":
            history.pop()
        last_user = history.pop()["content"] if history else ""
        return last_user, history, "", ""

    chat_inputs = [chatbot, system_prompt, *sampling_controls, show_template]
    chat_outputs = [message, chatbot, token_view, stats]
    send_event = send.click(chat, [message, *chat_inputs], chat_outputs, api_name="chat", **model_event())
    submit_event = message.submit(
        chat, [message, *chat_inputs], chat_outputs, api_visibility="private", **model_event()
    )
    retry_event = retry.click(chat_retry, chat_inputs, chat_outputs, api_name="chat_retry", **model_event())
    stop.click(None, cancels=[send_event, submit_event, retry_event])
    undo.click(undo_last, [chatbot], chat_outputs, api_name="chat_undo")
    clear.click(lambda: ("", [], "", ""), None, chat_outputs, api_name="chat_clear")


def _build_controls(lm: LoadedModel, settings: Settings) -> list[gr.components.Component]:
    """System prompt, sampling settings, max tokens, seed, template toggle (in that order)."""
    template_note = "" if lm.has_chat_template else " (this model has no chat template: unused)"
    system_prompt = gr.Textbox(
        DEFAULT_SYSTEM_PROMPT,
        label="System prompt",
        lines=2,
        info="Instructions the model sees before the conversation" + template_note,
    )
    with gr.Accordion("Sampling", open=True):
        temperature = UncheckedSlider(
            0,
            2,
            value=0.7,
            step=0.05,
            label="Temperature",
            info="Divides the logits: <1 sharper, >1 flatter; 0 = greedy (always the top token)",
        )
        top_k = UncheckedSlider(
            0, 200, value=50, step=1, label="Top-k", info="Keep only the k most likely tokens; 0 = off"
        )
        top_p = UncheckedSlider(
            0.01,
            1,
            value=0.95,
            step=0.01,
            label="Top-p",
            info="Keep the most likely tokens until their probabilities sum to p; 1 = off",
        )
        min_p = UncheckedSlider(
            0,
            1,
            value=0.0,
            step=0.01,
            label="Min-p",
            info="Drop tokens less likely than min-p × the top token's probability; 0 = off",
        )
        repetition = UncheckedSlider(
            0.5,
            2,
            value=1.0,
            step=0.05,
            label="Repetition penalty",
            info="Divides the score of tokens already in the text; >1 discourages repeats",
        )
        max_new = UncheckedSlider(
            1,
            settings.max_new_tokens_limit,
            value=min(256, settings.max_new_tokens_limit),
            step=1,
            label="Max new tokens",
            info="Longest answer, in tokens",
        )
        seed = gr.Textbox(
            "",
            label="Seed",
            placeholder="random",
            info="Same seed + same settings = same answer; empty = a new random seed each time",
        )
    show_template = gr.Checkbox(
        False,
        label="Show templated token stream",
        info="The exact tokens the model sees, special tokens included",
    )
    return [system_prompt, temperature, top_k, top_p, min_p, repetition, max_new, seed, show_template]
