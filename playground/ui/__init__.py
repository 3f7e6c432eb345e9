"""Gradio UI: one build_<tab>_tab() per tab; handlers stay thin and call the engine."""
