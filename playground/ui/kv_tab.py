"""KV-cache memory tab (placeholder until its issue lands)."""

import gradio as gr

from playground.model import LoadedModel


def build_kv_tab(lm: LoadedModel) -> None:
    gr.Markdown("**Coming next:** KV-cache memory calculator.")
