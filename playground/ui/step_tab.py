"""Step-by-step tab (placeholder until its issue lands)."""

import gradio as gr

from playground.model import LoadedModel


def build_step_tab(lm: LoadedModel) -> None:
    gr.Markdown("**Coming next:** pick the next token yourself, stage by stage.")
