"""Chat tab: streaming answers, each token coloured by its probability, with timings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground.chat import ChatRequest, ChatUpdate, message_role, normalize_history, stream_chat, with_footer
from playground.errors import PlaygroundError
from playground.model import LoadedModel
from playground.sampling import SamplingSettings
from playground.settings import Settings
from playground.tokens import token_piece
from playground.ui.common import UncheckedSlider, as_number, as_whole, model_event, model_handler, parse_seed
from playground.ui.token_html import answer_tokens_html, legend_html, templated_stream_html

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly."


def make_request(history: list[dict[str, str]], system_prompt: str, *controls: Any) -> ChatRequest:
    """The engine request from the UI's control values; every bad value is named."""
    temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens, seed = controls
    settings = SamplingSettings(
        temperature=as_number(temperature, "temperature"),
        top_k=as_whole(top_k, "top-k"),
        top_p=as_number(top_p, "top-p"),
        min_p=as_number(min_p, "min-p"),
        repetition_penalty=as_number(repetition_penalty, "repetition penalty"),
    )
    max_new = as_whole(max_new_tokens, "max new tokens")
    return ChatRequest(history, system_prompt or "", settings, max_new, parse_seed(seed))


def answer_stats(update: ChatUpdate) -> str:
    """One line of statistics for an answer (shown under it)."""
    stats = update.timings.summary() + f" · seed {update.seed}"
    if update.finished:
        stats += f" · stopped: {update.stop_reason.replace('_', ' ')}"
    return stats


def render_answer(lm: LoadedModel, update: ChatUpdate, show_template: bool) -> tuple[str, str]:
    """(token view html, statistics markdown with notes) for one answer."""
    if show_template:
        ids = update.prompt_ids + [token.id for token in update.tokens]
        pieces = [token_piece(lm.tokenizer, i) for i in ids]
        view = templated_stream_html(pieces, len(update.prompt_ids))
    else:
        view = legend_html() + answer_tokens_html(update.tokens)
    notes = "".join(f"\n\n> {note}" for note in update.notes)
    return view, answer_stats(update) + notes


class ChatHandlers:
    """The tab's event handlers as plain methods (callable from tests without a server)."""

    def __init__(self, lm: LoadedModel, settings: Settings) -> None:
        self.lm = lm
        self.settings = settings

    def chat(
        self,
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
        shown = [*(history or []), {"role": "user", "content": message}]  # earlier footers stay
        sampling = (temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens, seed)
        request = make_request(normalize_history(shown), system_prompt, *sampling)
        box: Any = ""  # clear the message box once; later updates leave what the user types
        for update in stream_chat(self.lm, request, self.settings.max_new_tokens_limit):
            view, stats = render_answer(self.lm, update, bool(show_template))
            answer = with_footer(update.text, answer_stats(update)) if update.finished else update.text
            kept = update if update.finished else gr.skip()  # state is copied: store it once
            yield box, [*shown, {"role": "assistant", "content": answer}], view, stats, kept
            box = gr.skip()

    def chat_retry(
        self,
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
        message, earlier, *_ = self.chat_undo(history)
        if not message:
            raise PlaygroundError("Nothing to retry yet: send a message first.")
        sampling = (temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens, seed)
        yield from self.chat(message, earlier, system_prompt, *sampling, show_template)

    @staticmethod
    def chat_undo(history: list) -> tuple:
        """Remove the last exchange and put the user's message back in the box."""
        history = list(history or [])
        while history and message_role(history[-1]) != "user":
            history.pop()
        last_user = normalize_history(history[-1:])[0]["content"] if history else ""
        return last_user, history[:-1], "", "", None

    @staticmethod
    def chat_clear() -> tuple:
        return "", [], "", "", None

    @staticmethod
    def chat_stopped(history: list, stats: str) -> tuple[list, str]:
        """After Stop: say so under the cut-off answer and in the statistics."""
        history = list(history or [])
        if not stats or "stopped:" in stats:
            return history, stats
        first_line, _, notes = stats.partition("\n\n")
        first_line += " · stopped: by you"
        last = normalize_history(history[-1:])
        if last and last[0]["role"] == "assistant":
            history[-1] = {"role": "assistant", "content": with_footer(last[0]["content"], first_line)}
        return history, first_line + (f"\n\n{notes}" if notes else "")

    def show_answer(self, last: ChatUpdate | None, show_template: bool) -> Any:
        """Re-render the last answer's token view when the template toggle changes."""
        if last is None:
            return gr.skip()
        return render_answer(self.lm, last, bool(show_template))[0]


def build_chat_tab(lm: LoadedModel, settings: Settings) -> None:
    """The Chat tab (call inside a gr.Tab)."""
    c: dict[str, Any] = {}
    with gr.Row():
        with gr.Column(scale=3):
            c["chatbot"] = gr.Chatbot(label="Conversation", height=380, buttons=["copy"])
            with gr.Row():
                c["message"] = gr.Textbox(
                    label="Message",
                    placeholder="Ask something… (Enter to send)",
                    show_label=False,
                    scale=5,
                    autofocus=True,
                    elem_id="chat-message",
                )
                c["send"] = gr.Button("Send", variant="primary", scale=1, min_width=80, elem_id="chat-send")
            with gr.Row():
                for name in ("Stop", "Retry", "Undo", "Clear"):
                    c[name.lower()] = gr.Button(name, size="sm")
            c["stats"] = gr.Markdown(label="Statistics", elem_classes=["chat-stats"])
            c["token_view"] = gr.HTML(label="Answer tokens")
            c["last_answer"] = gr.State(None)  # the last finished ChatUpdate, for re-rendering
        with gr.Column(scale=1):
            c["controls"] = _build_controls(lm, settings)
    _wire(ChatHandlers(lm, settings), c)


def _wire(h: ChatHandlers, c: dict[str, Any]) -> None:
    """Send/Enter and Retry stream through the model queue; Stop cancels them."""
    inputs = [c["chatbot"], *c["controls"]]
    outputs = [c["message"], c["chatbot"], c["token_view"], c["stats"], c["last_answer"]]
    chat, retry = model_handler(h.chat), model_handler(h.chat_retry)
    once = {"trigger_mode": "once", **model_event()}  # a second Send while streaming is ignored
    send_event = gr.on(
        [c["send"].click, c["message"].submit],
        chat,
        [c["message"], *inputs],
        outputs,
        api_name="chat",
        **once,
    )
    retry_event = c["retry"].click(retry, inputs, outputs, api_name="chat_retry", **once)
    stop_inputs = [c["chatbot"], c["stats"]]
    c["stop"].click(
        h.chat_stopped, stop_inputs, stop_inputs, cancels=[send_event, retry_event], api_name="chat_stop"
    )
    show_template = c["controls"][-1]
    show_template.change(
        h.show_answer, [c["last_answer"], show_template], [c["token_view"]], api_visibility="private"
    )
    c["undo"].click(h.chat_undo, [c["chatbot"]], outputs, api_name="chat_undo")
    c["clear"].click(h.chat_clear, None, outputs, api_name="chat_clear")


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
