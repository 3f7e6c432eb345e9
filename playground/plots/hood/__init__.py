"""Plotly figures of the Under the hood lessons: one module per lesson, the shared style in style.py."""
