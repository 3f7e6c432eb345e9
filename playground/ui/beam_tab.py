"""Beam search tab (placeholder until its issue lands)."""

import gradio as gr

from playground.model import LoadedModel


def build_beam_tab(lm: LoadedModel) -> None:
    gr.Markdown("**Coming next:** the real beam search tree.")
