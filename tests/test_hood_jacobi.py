"""Why not all at once: Jacobi decoding ends exactly on greedy `generate`, in at most n rounds, its
final prefix never shrinks, each round is one forward of the canvas against the prompt's cache;
the measured first guess on the embedded model; bad input; the view through the tab's handler."""

from __future__ import annotations

import itertools

import pytest
from hood_helpers import generate_greedy
from hood_tab_helpers import Hood

from playground import hood
from playground.errors import PlaygroundError
from playground.hood import jacobi as jacobi_lesson
from playground.traces import load_traces

FRANCE = "The capital of France is"


def assert_converged_properly(result, n: int) -> None:
    """At most n rounds; the final prefix never shrinks and the proved prefix grows every round."""
    finals = [r.final for r in result.rounds]
    settled = [r.settled for r in result.rounds]
    assert 1 <= len(result.rounds) <= n
    assert finals == sorted(finals) and all(f >= s for f, s in zip(finals, settled, strict=True))
    assert all(b > a for a, b in itertools.pairwise(settled)) and settled[0] >= 1
    assert all(len(r.ids) == n for r in result.rounds) and len(result.guess) == n
    for before, r in zip([result.guess, *[x.ids for x in result.rounds]], result.rounds, strict=False):
        assert r.changed == sum(a != b for a, b in zip(before, r.ids, strict=True))


def test_the_capital_of_france_first_guess_and_eight_rounds(embedded_lm):
    """Measured: the first parallel guess is incoherent; the right prefix grows 1, 2, ... 8."""
    ids = embedded_lm.tokenizer(FRANCE).input_ids
    result = jacobi_lesson.run(embedded_lm, ids, 8)
    tokenizer = embedded_lm.tokenizer
    assert result.guess == tokenizer(" the", add_special_tokens=False).input_ids * 8
    assert tokenizer.decode(result.rounds[0].ids) == " Paris capital capital capital capital the the the"
    assert [r.final for r in result.rounds] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert result.ids == result.greedy_ids == generate_greedy(embedded_lm, ids, 8) and result.identical
    assert_converged_properly(result, 8)
    assert len(result.step_seconds) == 7 and all(s > 0 for s in result.step_seconds)
    assert result.round_seconds > 0 and result.prefill_seconds > 0


@pytest.mark.parametrize(
    "text, n, guess",
    [
        ("Once upon a time", 10, "last"),
        ("def fibonacci(n):", 12, "first"),
        ("one, two, three, four, five, six,", 9, "the"),
        ("我爱你", 6, "the"),
    ],
)
def test_jacobi_equals_greedy_generate(embedded_lm, text, n, guess):
    ids = embedded_lm.tokenizer(text).input_ids
    result = jacobi_lesson.run(embedded_lm, ids, n, guess=guess)
    assert result.ids == generate_greedy(embedded_lm, ids, n) == result.greedy_ids
    assert_converged_properly(result, n)
    assert (
        result.rounds[-1].final == len(result.rounds[-1].ids) or result.ids[-1] in embedded_lm.eos_token_ids
    )


def test_tiny_model_equals_generate_for_every_guess(tiny_lm):
    ids = [5, 6, 7, 8, 5, 6, 7]
    reference = generate_greedy(tiny_lm, ids, 20)
    for guess in ("the", "last", "first", [9] * 20):
        result = jacobi_lesson.run(tiny_lm, ids, 20, guess=guess)
        assert result.ids == reference[: len(result.ids)] and result.identical
        assert_converged_properly(result, 20)


def test_a_right_guess_settles_in_fewer_rounds(tiny_lm):
    """Guessing the answer itself takes one round (it proves the guess); the first k right, at most n - k."""
    ids = [11, 12, 13]
    reference = generate_greedy(tiny_lm, ids, 12)
    assert len(reference) == 12  # no end token: every position counts
    exact = jacobi_lesson.run(tiny_lm, ids, 12, guess=reference)
    assert len(exact.rounds) == 1 and exact.rounds[0].changed == 0 and exact.identical
    half = jacobi_lesson.run(tiny_lm, ids, 12, guess=reference[:6] + [9] * 6)
    assert len(half.rounds) <= 6 and half.rounds[0].final >= 7 and half.identical


def test_one_prefill_then_one_forward_of_n_plus_1_tokens_per_round(tiny_lm):
    """The prompt is read once; greedy forwards one token; each round the canvas (and the prompt's last
    token) against the cached prompt."""
    lengths: list[tuple[int, int]] = []  # (new tokens, cached tokens) of each forward

    def see(_module, _args, kwargs):
        cache = kwargs.get("past_key_values")
        lengths.append((kwargs["input_ids"].shape[-1], cache.get_seq_length() if cache is not None else 0))

    prompt, n = [5, 6, 7, 8, 9], 6
    handle = tiny_lm.model.register_forward_pre_hook(see, with_kwargs=True)
    try:
        result = jacobi_lesson.run(tiny_lm, prompt, n)
    finally:
        handle.remove()
    greedy = [(len(prompt), 0)] + [(1, len(prompt) + k) for k in range(n - 1)]
    assert lengths == greedy + [(n + 1, len(prompt) - 1)] * len(result.rounds)


def test_bad_input_is_refused(tiny_lm, embedded_lm):
    with pytest.raises(PlaygroundError, match="The prompt is empty"):
        jacobi_lesson.run(tiny_lm, [], 8)
    for n in (0, 65, -1, True, 2.5):
        with pytest.raises(
            PlaygroundError, match="Tokens decoded in parallel must be a whole number from 1 to 64"
        ):
            jacobi_lesson.run(tiny_lm, [1, 2, 3], n)
    with pytest.raises(PlaygroundError, match="510 \\+ 8 tokens is more than the context of 512"):
        jacobi_lesson.run(tiny_lm, list(range(3, 513)), 8)
    with pytest.raises(PlaygroundError, match="8193 \\+ 1 tokens is more than the context of 8192"):
        jacobi_lesson.run(embedded_lm, [314] * 8193, 1)
    with pytest.raises(PlaygroundError, match="one token per position \\(4\\), got 2"):
        jacobi_lesson.run(tiny_lm, [1, 2, 3], 4, guess=[5, 6])
    with pytest.raises(PlaygroundError, match=r"outside the vocabulary \(0..49151\)"):
        jacobi_lesson.run(tiny_lm, [1, 2, 3], 2, guess=[5, 10**6])
    with pytest.raises(PlaygroundError, match="Unknown starting guess 'random'"):
        jacobi_lesson.run(tiny_lm, [1, 2, 3], 2, guess="random")


def test_the_view_runs_and_saves_a_trace(embedded_lm):
    lessons = Hood(embedded_lm)
    shown = lessons.last("jacobi", FRANCE, 8, "the")
    assert shown["jacobi_status"].startswith("Done: round 8: 8/8 tokens final")
    grid = shown["jacobi_grid"]
    assert "“ Paris capital capital capital capital the the the”" in grid
    assert grid.count("<tr>") == 1 + 1 + 8 + 1  # header, guess, 8 rounds, greedy
    assert "**8 Jacobi rounds** for n = 8" in shown["jacobi_summary"]
    assert "Identical to plain greedy decoding ✓" in shown["jacobi_summary"]
    assert "Final tokens after each round: 1, 2, 3, 4, 5, 6, 7, 8." in shown["jacobi_summary"]
    progress = shown["jacobi_progress"].to_dict()["data"]
    assert list(progress[1]["y"]) == [1, 2, 3, 4, 5, 6, 7, 8]
    [trace] = load_traces(lessons.trace("jacobi"))
    assert trace.data["view"] == "jacobi" and "jacobi_grid" in trace.data["outputs"]["texts"]


def test_the_view_groups_byte_tokens_and_refuses_bad_input(embedded_lm):
    lessons = Hood(embedded_lm)
    shown = lessons.last("jacobi", "我爱你", 3, "last")
    assert "byte" in shown["jacobi_grid"] and shown["jacobi_status"].startswith("Done")
    with pytest.raises(PlaygroundError, match="The prompt is empty"):
        list(lessons.run("jacobi", "", 8, "the"))
    with pytest.raises(PlaygroundError, match="The prompt is empty"):
        list(lessons.run("jacobi", "  ", 8, "the"))
    with pytest.raises(PlaygroundError, match="from 1 to 64, got 65"):
        list(lessons.run("jacobi", FRANCE, 65, "the"))


def test_the_api_lists_it():
    assert hood.jacobi is jacobi_lesson and hood.jacobi.run is jacobi_lesson.run
    assert "jacobi" in [lesson.name for lesson in hood.LESSONS]
