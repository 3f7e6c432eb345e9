"""The "Under the hood" tab: one view per lesson, and the registry the tab is built from.

Adding a lesson: its module in playground/hood/ (the lesson), its figures in plots/hood/, its
view here (a LessonView subclass, see base.py), and one line in VIEWS below.
"""

from playground.ui.hood import (
    attention,
    batching,
    continuous_batching,
    jacobi,
    kv_on_off,
    lens,
    prefill_decode,
    quantization,
    sampling_order,
    speculative,
    teacher_forcing,
    tokens,
)
from playground.ui.hood.base import HoodEnv, LessonView, RunContext
from playground.ui.hood.tab import HoodTab, build_hood_tab

VIEWS: tuple[LessonView, ...] = (
    tokens.VIEW,
    teacher_forcing.VIEW,
    sampling_order.VIEW,
    attention.VIEW,
    lens.VIEW,
    kv_on_off.VIEW,
    prefill_decode.VIEW,
    quantization.VIEW,
    speculative.VIEW,
    jacobi.VIEW,
    batching.VIEW,
    continuous_batching.VIEW,
)

__all__ = ["VIEWS", "HoodEnv", "HoodTab", "LessonView", "RunContext", "build_hood_tab"]
