"""The "Under the hood" tab: one view per lesson, and the registry the tab is built from.

Adding a lesson: its module in playground/hood/ (the lesson), its figures in plots/hood/, its
view here (a LessonView subclass, see base.py), and one line in VIEWS below.
"""

from playground.ui.hood import (
    attention,
    batching,
    kv_on_off,
    lens,
    prefill_decode,
    quantization,
    sampling_order,
    speculative,
    tokens,
)
from playground.ui.hood.base import HoodEnv, LessonView, RunContext
from playground.ui.hood.tab import HoodTab, build_hood_tab

VIEWS: tuple[LessonView, ...] = (
    tokens.VIEW,
    sampling_order.VIEW,
    kv_on_off.VIEW,
    prefill_decode.VIEW,
    attention.VIEW,
    lens.VIEW,
    speculative.VIEW,
    batching.VIEW,
    quantization.VIEW,
)

__all__ = ["VIEWS", "HoodEnv", "HoodTab", "LessonView", "RunContext", "build_hood_tab"]
