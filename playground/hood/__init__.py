"""Under the hood: the lessons of autoregressive generation, each measured live on the loaded model.

    from playground import hood
    hood.kv_on_off(lm, hood.preset_ids(lm.tokenizer, 200), new_tokens=4).identical   # True

One module per lesson (see common.py for the contract); LESSONS lists them in the order the UI
shows them. Every lesson runs the engine's own forwards (engine/probes.py over engine/forward.py):
nothing is simulated.
"""

from playground.hood import attention as _attention
from playground.hood import batching as _batching
from playground.hood import continuous_batching as _continuous_batching
from playground.hood import jacobi as _jacobi
from playground.hood import kv_on_off as _kv_on_off
from playground.hood import lens as _lens
from playground.hood import prefill_decode as _prefill_decode
from playground.hood import quantization as _quantization
from playground.hood import sampling_order as _sampling_order
from playground.hood import speculative as _speculative
from playground.hood import teacher_forcing as _teacher_forcing
from playground.hood import tokens as _tokens
from playground.hood.attention import AttentionView, attention_maps, attention_view, iter_attention
from playground.hood.batching import BatchingResult, batching, iter_batching
from playground.hood.common import Lesson, preset_ids, require
from playground.hood.continuous_batching import (
    Arrival,
    ContinuousBatching,
    continuous_batching,
    iter_continuous_batching,
)
from playground.hood.jacobi import JacobiResult, iter_jacobi, jacobi_decode
from playground.hood.kv_on_off import KVOnOff, iter_kv_on_off, kv_on_off
from playground.hood.lens import LensView, iter_lens, lens_view, logit_lens
from playground.hood.prefill_decode import PrefillDecode, iter_prefill_vs_decode, prefill_vs_decode
from playground.hood.quantization import (
    QuantizationResult,
    QuantizationRun,
    iter_quantization,
    quantization,
    quantized_weights,
)
from playground.hood.sampling_order import (
    Histogram,
    SamplingOrder,
    iter_sampling_order,
    sample_histogram,
    sampling_order,
)
from playground.hood.speculative import SpeculativeResult, iter_speculative, speculative_decode
from playground.hood.teacher_forcing import (
    ErrorAccumulation,
    TeacherForcing,
    error_accumulation,
    iter_error_accumulation,
    iter_teacher_forcing,
    teacher_forcing,
)
from playground.hood.tokens import BpeMerges, Token, TokensResult, bpe_merges, iter_tokens, tokenize

LESSONS: tuple[Lesson, ...] = (
    _tokens.LESSON,
    _teacher_forcing.LESSON,
    _sampling_order.LESSON,
    _attention.LESSON,
    _lens.LESSON,
    _kv_on_off.LESSON,
    _prefill_decode.LESSON,
    _quantization.LESSON,
    _speculative.LESSON,
    _jacobi.LESSON,
    _batching.LESSON,
    _continuous_batching.LESSON,
)

__all__ = [
    "LESSONS",
    "Arrival",
    "AttentionView",
    "BatchingResult",
    "BpeMerges",
    "ContinuousBatching",
    "ErrorAccumulation",
    "Histogram",
    "JacobiResult",
    "KVOnOff",
    "LensView",
    "Lesson",
    "PrefillDecode",
    "QuantizationResult",
    "QuantizationRun",
    "SamplingOrder",
    "SpeculativeResult",
    "TeacherForcing",
    "Token",
    "TokensResult",
    "attention_maps",
    "attention_view",
    "batching",
    "bpe_merges",
    "continuous_batching",
    "error_accumulation",
    "iter_attention",
    "iter_batching",
    "iter_continuous_batching",
    "iter_error_accumulation",
    "iter_jacobi",
    "iter_kv_on_off",
    "iter_lens",
    "iter_prefill_vs_decode",
    "iter_quantization",
    "iter_sampling_order",
    "iter_speculative",
    "iter_teacher_forcing",
    "iter_tokens",
    "jacobi_decode",
    "kv_on_off",
    "lens_view",
    "logit_lens",
    "prefill_vs_decode",
    "preset_ids",
    "quantization",
    "quantized_weights",
    "require",
    "sample_histogram",
    "sampling_order",
    "speculative_decode",
    "teacher_forcing",
    "tokenize",
]
