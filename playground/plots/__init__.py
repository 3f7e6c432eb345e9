"""Plotly figures from plain data (no model, no gradio): one module per view."""
