"""Under the hood: the lessons of autoregressive generation, each measured live on the loaded model.

    from playground import hood
    hood.kv_on_off.run(lm, hood.preset_ids(lm.tokenizer, 200), new_tokens=4).identical   # True

One module per lesson, all named by one rule (see common.py): `playground.hood.<name>` is the module,
its `run(lm, ...)` returns the result, its `iter_run(lm, ..., control=)` yields it as it fills, and
`LESSON` registers it. LESSONS lists them in the order the UI shows them. Every lesson runs the
engine's own forwards: nothing is simulated.
"""

from playground.hood import (
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
from playground.hood.common import Lesson, preset_ids, require

LESSONS: tuple[Lesson, ...] = (
    tokens.LESSON,
    teacher_forcing.LESSON,
    sampling_order.LESSON,
    attention.LESSON,
    lens.LESSON,
    kv_on_off.LESSON,
    prefill_decode.LESSON,
    quantization.LESSON,
    speculative.LESSON,
    jacobi.LESSON,
    batching.LESSON,
    continuous_batching.LESSON,
)

__all__ = [
    "LESSONS",
    "Lesson",
    "attention",
    "batching",
    "continuous_batching",
    "jacobi",
    "kv_on_off",
    "lens",
    "prefill_decode",
    "preset_ids",
    "quantization",
    "require",
    "sampling_order",
    "speculative",
    "teacher_forcing",
    "tokens",
]
