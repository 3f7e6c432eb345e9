"""Sampling stages vs the transformers warper chain, stage by stage (within 1e-6)."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from playground.engine.sampling import (
    DEFAULT_ORDER,
    SamplingSettings,
    build_processors,
    choose_token,
    final_scores,
    sampling_stages,
    seeded_generator,
    validate_settings,
    with_changes,
)
from playground.errors import PlaygroundError

VOCAB = 500

SETTINGS = [
    {"temperature": 0.7},
    {"temperature": 1.3, "top_k": 20},
    {"top_k": 1},
    {"top_p": 0.9},
    {"top_p": 0.05},
    {"min_p": 0.1},
    {"min_p": 1.0},
    {"typical_p": 0.8},
    {"repetition_penalty": 1.3},
    {"repetition_penalty": 0.7},
    {"temperature": 0.8, "top_k": 50, "top_p": 0.9, "min_p": 0.05},
    {
        "temperature": 1.5,
        "top_k": 100,
        "top_p": 0.95,
        "min_p": 0.02,
        "typical_p": 0.9,
        "repetition_penalty": 1.2,
    },
    {"temperature": 0.5, "top_p": 0.8, "order": ["top_p", "temperature"]},
    {"top_k": 40, "min_p": 0.2, "temperature": 2.0, "order": ["min_p", "top_k", "temperature"]},
]


def transformers_chain(settings: SamplingSettings) -> list[tuple[str, object]]:
    """The transformers processors for the same settings, in the same order, as generate builds them."""
    make = {
        "repetition_penalty": lambda s: (
            s.repetition_penalty != 1.0 and RepetitionPenaltyLogitsProcessor(float(s.repetition_penalty))
        ),
        "temperature": lambda s: s.temperature != 1.0 and TemperatureLogitsWarper(float(s.temperature)),
        "top_k": lambda s: s.top_k != 0 and TopKLogitsWarper(s.top_k, min_tokens_to_keep=1),
        "top_p": lambda s: s.top_p < 1.0 and TopPLogitsWarper(s.top_p, min_tokens_to_keep=1),
        "min_p": lambda s: s.min_p > 0 and MinPLogitsWarper(s.min_p, min_tokens_to_keep=1),
        "typical_p": lambda s: s.typical_p < 1.0 and TypicalLogitsWarper(s.typical_p, min_tokens_to_keep=1),
    }
    return [(name, make[name](settings)) for name in settings.order if make[name](settings)]


def assert_same_scores(ours: torch.Tensor, theirs: torch.Tensor, label: str) -> None:
    ours, theirs = ours.reshape(-1), theirs.reshape(-1)
    assert torch.equal(torch.isneginf(ours), torch.isneginf(theirs)), f"{label}: removed sets differ"
    finite = ~torch.isneginf(theirs)
    torch.testing.assert_close(ours[finite], theirs[finite], atol=1e-6, rtol=1e-6, msg=label)
    torch.testing.assert_close(
        torch.softmax(ours, -1), torch.softmax(theirs, -1), atol=1e-6, rtol=0, msg=f"{label} probs"
    )


def check_against_transformers(logits: torch.Tensor, input_ids: torch.Tensor, raw_settings: dict) -> None:
    settings = validate_settings(raw_settings)
    stages = sampling_stages(logits, input_ids, settings)
    chain = transformers_chain(settings)
    assert [s.name for s in stages] == ["raw"] + [name for name, _ in chain]
    scores = logits.reshape(1, -1).clone()
    assert_same_scores(stages[0].logits, scores, "raw")
    for stage, (name, processor) in zip(stages[1:], chain, strict=True):
        scores = processor(input_ids.reshape(1, -1), scores)
        assert_same_scores(stage.logits, scores, f"{raw_settings} stage {name}")
    assert_same_scores(final_scores(logits, input_ids, settings), scores, "final_scores")


def random_logits(kind: str, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(VOCAB, generator=gen) * 3  # (vocab,)
    if kind == "ties":
        logits = (logits * 2).round() / 2  # many exactly equal scores
    elif kind == "extreme":
        logits[:5] = torch.tensor([1e4, 1e4 - 1, -1e4, 50.0, -float("inf")])
        logits[10:20] = -float("inf")
    elif kind == "peaked":
        logits[7] = 40.0
    return logits


@pytest.mark.parametrize("kind", ["normal", "ties", "extreme", "peaked"])
@pytest.mark.parametrize("raw_settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_each_stage_matches_transformers_on_random_logits(kind: str, raw_settings: dict) -> None:
    for seed in range(3):
        logits = random_logits(kind, seed)
        input_ids = torch.randint(0, VOCAB, (12,), generator=torch.Generator().manual_seed(seed + 100))
        check_against_transformers(logits, input_ids, raw_settings)


@pytest.fixture(scope="module")
def real_logits(embedded_lm) -> tuple[torch.Tensor, torch.Tensor]:
    """The embedded model's next-token logits (vocab,) after a real prompt, and its ids."""
    ids = embedded_lm.tokenizer("The quick brown fox jumps over the lazy", return_tensors="pt").input_ids
    with torch.inference_mode():
        logits = embedded_lm.model(ids).logits[0, -1].float()
    return logits, ids[0]


@pytest.mark.parametrize("raw_settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_each_stage_matches_transformers_on_embedded_model(real_logits, raw_settings: dict) -> None:
    logits, ids = real_logits
    check_against_transformers(logits, ids, raw_settings)


PROCESSOR_CLASSES = {
    "repetition_penalty": RepetitionPenaltyLogitsProcessor,
    "temperature": TemperatureLogitsWarper,
    "top_k": TopKLogitsWarper,
    "top_p": TopPLogitsWarper,
    "min_p": MinPLogitsWarper,
    "typical_p": TypicalLogitsWarper,
}


def test_default_order_is_generates_order(tiny_lm) -> None:
    """With every stage active, generate's own processor list runs them in our default order."""
    values = {"temperature": 0.7, "top_k": 20, "top_p": 0.9, "min_p": 0.05, "typical_p": 0.8}
    values["repetition_penalty"] = 1.3
    config = GenerationConfig(do_sample=True, **values)
    ids = torch.tensor([[5, 6, 7]])
    theirs = tiny_lm.model._get_logits_processor(
        generation_config=config, input_ids_seq_length=3, encoder_input_ids=ids, device="cpu", model_kwargs={}
    )
    theirs = [type(p) for p in theirs if type(p) in PROCESSOR_CLASSES.values()]
    ours = [PROCESSOR_CLASSES[name] for name, _ in build_processors(validate_settings(values))]
    assert len(ours) == len(PROCESSOR_CLASSES) and ours == theirs
    assert [PROCESSOR_CLASSES[name] for name in DEFAULT_ORDER] == theirs


def test_reordering_changes_the_result() -> None:
    logits = random_logits("normal", 1)
    first = sampling_stages(logits, None, {"temperature": 3.0, "top_p": 0.5})
    swapped = sampling_stages(
        logits, None, {"temperature": 3.0, "top_p": 0.5, "order": ["top_p", "temperature"]}
    )
    assert [s.name for s in swapped] == ["raw", "top_p", "temperature"]
    kept_first = (~torch.isneginf(first[-1].logits)).sum()
    kept_swapped = (~torch.isneginf(swapped[-1].logits)).sum()
    assert kept_first > kept_swapped  # a hotter distribution needs more tokens to reach 50 %


def test_removed_ids_are_exactly_the_new_minus_infinities() -> None:
    logits = random_logits("extreme", 2)
    stages = sampling_stages(logits, None, {"top_k": 100, "top_p": 0.8, "min_p": 0.05})
    removed_so_far = torch.isneginf(logits)
    for stage in stages[1:]:
        now = torch.isneginf(stage.logits)
        assert set(stage.removed_ids.tolist()) == set((now & ~removed_so_far).nonzero().flatten().tolist())
        assert torch.all(stage.probs[stage.removed_ids] == 0)
        removed_so_far = now
    assert stages[-1].probs.sum().item() == pytest.approx(1.0, abs=1e-5)


def test_temperature_zero_keeps_only_the_first_argmax() -> None:
    logits = torch.tensor([1.0, 3.0, 3.0, -2.0])
    stages = sampling_stages(logits, None, {"temperature": 0, "top_k": 2})
    assert [s.name for s in stages] == ["raw", "temperature"]  # the filters would do nothing
    assert stages[-1].probs.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert choose_token(stages[-1].logits.unsqueeze(0), validate_settings({"temperature": 0}), None) == 1


@pytest.mark.parametrize(
    ("raw_settings", "shown"),
    [
        ({"temperature": -0.5}, "-0.5"),
        ({"top_k": -3}, "-3"),
        ({"top_k": 2.5}, "2.5"),
        ({"top_p": 0.0}, "0.0"),
        ({"top_p": 1.5}, "1.5"),
        ({"min_p": 1.01}, "1.01"),
        ({"typical_p": 0}, "0"),
        ({"repetition_penalty": 0}, "0"),
        ({"temperature": float("nan")}, "nan"),
        ({"temperature": "hot"}, "'hot'"),
        ({"top_p": True}, "True"),
        ({"order": ["top_k", "top_k"]}, "['top_k', 'top_k']"),
        ({"order": ["top_q"]}, "top_q"),
        ({"warmth": 3}, "warmth"),
    ],
)
def test_bad_values_are_rejected_with_the_value(raw_settings: dict, shown: str) -> None:
    with pytest.raises(PlaygroundError) as info:
        validate_settings(raw_settings)
    assert shown in str(info.value)
    with pytest.raises(PlaygroundError):
        sampling_stages(torch.zeros(4), None, raw_settings)


def test_integral_float_top_k_is_accepted() -> None:
    assert validate_settings({"top_k": 40.0}).top_k == 40
    assert with_changes(SamplingSettings(), top_p=0.5).top_p == 0.5
    with pytest.raises(PlaygroundError, match=r"1\.5"):
        with_changes(SamplingSettings(), top_p=1.5)


def test_processors_never_mutate_their_input() -> None:
    logits = random_logits("ties", 3)
    ids = torch.tensor([1, 2, 3, 2])
    before_logits, before_ids = logits.clone(), ids.clone()
    settings = validate_settings(
        {
            "temperature": 0.7,
            "top_k": 30,
            "top_p": 0.9,
            "min_p": 0.05,
            "typical_p": 0.9,
            "repetition_penalty": 1.4,
        }
    )
    for _, processor in build_processors(settings):
        scores = logits.reshape(1, -1)
        processor(ids.reshape(1, -1), scores)
        assert torch.equal(logits, before_logits)
    sampling_stages(logits, ids, settings)
    final_scores(logits, ids, settings)
    assert torch.equal(logits, before_logits) and torch.equal(ids, before_ids)


def test_seeded_generator_draws_like_the_global_seed() -> None:
    scores = torch.log_softmax(random_logits("normal", 4), -1).unsqueeze(0)
    settings = validate_settings({"temperature": 1.0})
    ours = [choose_token(scores, settings, seeded_generator(7, torch.device("cpu"))) for _ in range(3)]
    torch.manual_seed(7)
    theirs = int(torch.multinomial(torch.softmax(scores, -1), 1))
    assert ours == [theirs] * 3
    draws = {choose_token(scores, settings, seeded_generator(None, torch.device("cpu"))) for _ in range(20)}
    assert len(draws) > 1  # an unseeded generator really is random


@pytest.mark.parametrize(
    ("raw_settings", "expected_kept"),
    [({"top_p": 0.75}, 2), ({"top_p": 0.875}, 3), ({"min_p": 0.25}, 4), ({"min_p": 0.5}, 2)],
)
def test_boundaries_match_transformers_exactly(raw_settings: dict, expected_kept: int) -> None:
    """Probabilities 1/8, 1/8, 1/4, 1/2 are exact in float32: a mass or ratio exactly at the
    threshold must be kept or removed as transformers does."""
    logits = torch.log(torch.tensor([1.0, 1.0, 2.0, 4.0]))
    check_against_transformers(logits, torch.tensor([0]), raw_settings)
    kept = (~torch.isneginf(sampling_stages(logits, None, raw_settings)[-1].logits)).sum().item()
    assert kept == expected_kept
