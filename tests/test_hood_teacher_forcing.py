"""Training reads in parallel, generation writes in series, on the real embedded model: teacher
forcing equals one plain forward, the continuations equal transformers' greedy generate, the KL
recomputed without the lesson, bad input, and the view run as Gradio runs it."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest
import torch
from hood_helpers import generate_greedy
from hood_tab_helpers import Hood

from playground import hood
from playground.engine.prompts import encode_continuation, encode_prompt, encode_text
from playground.errors import PlaygroundError
from playground.hood.teacher_forcing import MAX_TOKENS, TOP
from playground.traces import load_traces
from playground.ui.hood.teacher_forcing import AT, PROMPT, RANK, REFERENCE, forced_token, reference_ids


@pytest.fixture(scope="module")
def prompt(embedded_lm) -> list[int]:
    return encode_text(embedded_lm.tokenizer, PROMPT)


def full_logprobs(lm, ids: list[int]) -> torch.Tensor:
    """log_softmax of one plain forward of the model over ids: (len(ids), vocab)."""
    with lm.lock, torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([ids])).logits[0]
    return torch.log_softmax(logits.float(), dim=-1)


def test_teacher_forcing_scores_every_token_in_one_forward_as_the_model_does(embedded_lm, prompt):
    ids = prompt + encode_continuation(embedded_lm.tokenizer, REFERENCE)
    start, n = len(prompt), len(ids) - len(prompt)
    result = hood.teacher_forcing.run(embedded_lm, ids, start)
    reference = full_logprobs(embedded_lm, ids)[start - 1 : -1]  # row t - 1 predicts token t
    expected = reference.gather(1, torch.tensor(ids[start:])[:, None])[:, 0]
    assert len(result.logprobs) == n
    assert torch.allclose(torch.tensor(result.logprobs), expected, atol=1e-4, rtol=0)
    assert result.losses == [-lp for lp in result.logprobs]
    assert result.argmax_ids == reference.argmax(dim=-1).tolist()
    assert result.ranks == ((reference > expected[:, None]).sum(dim=-1) + 1).tolist()
    # free running is greedy generate from the prompt, one forward per token, each timed
    assert result.free_ids == generate_greedy(embedded_lm, prompt, n)
    assert len(result.serial_step_seconds) == n and min(result.serial_step_seconds) > 0
    assert result.parallel_seconds > 0 and result.serial_seconds == sum(result.serial_step_seconds)
    # it follows the reference until leaves_at; up to there both read the same text, so free
    # running picks what teacher forcing's argmax picks
    leaves = result.leaves_at
    assert leaves is not None and result.free_ids[:leaves] == ids[start : start + leaves]
    assert result.free_ids[leaves] != ids[start + leaves]
    assert result.free_ids[: leaves + 1] == result.argmax_ids[: leaves + 1]


def next_logprobs(lm, ids: list[int]) -> torch.Tensor:
    return full_logprobs(lm, ids)[-1]


def test_error_accumulation_is_greedy_generate_twice_with_one_token_forced(embedded_lm, prompt):
    lm, new_tokens = embedded_lm, 10
    result = hood.teacher_forcing.error_accumulation(lm, prompt, AT, None, new_tokens, rank=RANK)
    original = generate_greedy(lm, prompt, new_tokens)
    assert result.original_ids == original
    top = torch.topk(next_logprobs(lm, prompt + original[:AT]).exp(), TOP)
    assert [i for i, _ in result.candidates] == top.indices.tolist()
    forced = top.indices[RANK - 1].item()
    assert result.token_id == forced != original[AT] and result.forced_rank == RANK
    prefix = [*original[:AT], forced]
    assert result.perturbed_ids == prefix + generate_greedy(lm, prompt + prefix, new_tokens - AT - 1)
    assert result.first_difference == AT and result.differing >= 1
    # the KL recomputed from plain forwards of both texts, position by position
    assert len(result.kl) == new_tokens - AT and result.kl[0] == 0.0
    for i, kl in enumerate(result.kl[1:], start=1):
        p = next_logprobs(lm, prompt + original[: AT + i])
        q = next_logprobs(lm, prompt + result.perturbed_ids[: AT + i])
        assert kl == pytest.approx(float((p.exp() * (p - q)).sum()), rel=1e-3, abs=1e-4)
    assert max(result.kl) > 0.1  # one word changed the distributions after it


def test_forcing_the_models_own_token_changes_nothing_and_a_given_id_is_forced(embedded_lm, prompt):
    same = hood.teacher_forcing.error_accumulation(embedded_lm, prompt, 0, None, 3, rank=1)
    assert same.perturbed_ids == same.original_ids and same.first_difference is None
    assert same.kl == [0.0, pytest.approx(0.0, abs=1e-6), pytest.approx(0.0, abs=1e-6)]
    sad = encode_continuation(embedded_lm.tokenizer, " sad")[0]
    given = hood.teacher_forcing.error_accumulation(embedded_lm, prompt, 1, sad, 3)
    assert given.perturbed_ids[:2] == [same.original_ids[0], sad] and given.token_id == sad
    probs = next_logprobs(embedded_lm, prompt + same.original_ids[:1]).exp()
    assert given.forced_rank == int((probs > probs[sad]).sum()) + 1
    assert given.forced_prob == pytest.approx(float(probs[sad]), rel=1e-4)


def test_a_position_past_where_the_model_ends_its_answer_is_refused(embedded_lm):
    chat = encode_prompt(embedded_lm.tokenizer, "Finish the sentence: When Tom got a puppy, he was", True)
    answer = generate_greedy(embedded_lm, chat, 30)
    assert answer[-1] in embedded_lm.eos_token_ids and len(answer) < 20  # it ends by itself
    with pytest.raises(PlaygroundError, match=f"past the continuation.*after {len(answer)} tokens"):
        hood.teacher_forcing.error_accumulation(embedded_lm, chat, 20, None, 30, rank=2)


@pytest.mark.parametrize(
    ("ids", "start", "message"),
    [
        ([], 1, "The text is empty"),
        ([1] * (MAX_TOKENS + 1), 1, f"at most {MAX_TOKENS} tokens"),
        ([1, 2, 3], 3, "at least 1 token after it"),
        ([1, 2, 3], 0, "a prompt of at least 1 token"),
        ([1, 49152, 3], 1, r"outside the vocabulary \(0..49151\)"),
    ],
)
def test_teacher_forcing_refuses_bad_input(embedded_lm, ids, start, message):
    with pytest.raises(PlaygroundError, match=message):
        hood.teacher_forcing.run(embedded_lm, ids, start)


@pytest.mark.parametrize(
    ("at", "token_id", "new_tokens", "rank", "message"),
    [
        (8, None, 8, 2, r"Position 8 is past the continuation: it has 8 tokens \(positions 0 to 7\)"),
        (0, 49152, 8, None, r"Token id 49152 is outside the vocabulary \(0..49151\)"),
        (0, -1, 8, None, "outside the vocabulary"),
        (0, 5, 8, 2, "a token id, or the rank"),
        (0, None, 8, TOP + 1, f"rank must be a whole number from 1 to {TOP}"),
        (0, None, 65, 2, "New tokens must be a whole number from 1 to 64"),
    ],
)
def test_error_accumulation_refuses_bad_input(embedded_lm, prompt, at, token_id, new_tokens, rank, message):
    with pytest.raises(PlaygroundError, match=message):
        hood.teacher_forcing.error_accumulation(embedded_lm, prompt, at, token_id, new_tokens, rank=rank)
    with pytest.raises(PlaygroundError, match="The prompt is empty"):
        hood.teacher_forcing.error_accumulation(embedded_lm, [], 0, None, 4, rank=2)


def test_the_views_text_parsing(embedded_lm):
    tokenizer = embedded_lm.tokenizer
    prompt, ids = reference_ids(tokenizer, "Tom was", "happy")  # a space goes between them
    assert ids == prompt + encode_continuation(tokenizer, " happy")
    assert reference_ids(tokenizer, "Tom was", ", happy")[1] == prompt + encode_continuation(
        tokenizer, ", happy"
    )
    assert forced_token(tokenizer, "  ") is None and forced_token(tokenizer, "123") == 123
    assert forced_token(tokenizer, " sad") == encode_continuation(tokenizer, " sad")[0]
    with pytest.raises(PlaygroundError, match="is 2 tokens"):
        forced_token(tokenizer, " sad dog")
    for prompt_text, reference, message in (
        ("", "x", "The prompt is empty"),
        ("x", " ", "reference continuation is empty"),
    ):
        with pytest.raises(PlaygroundError, match=message):
            reference_ids(tokenizer, prompt_text, reference)


def test_the_view_runs_streams_and_saves_a_trace(embedded_lm):
    lessons = Hood(embedded_lm)
    args = (PROMPT, " so happy, because he", 6, AT, RANK, "")
    shown = list(lessons.run("tf", *args))
    statuses = [s["tf_status"] for s in shown]
    assert statuses[0] == "Running: score in parallel, write in series…"  # before any work
    assert statuses[1].startswith("Running: 1 forward scored") and statuses[-1].startswith("Done")
    assert any("free running: token" in s for s in statuses) and any("answer position" in s for s in statuses)
    last = shown[-1]
    assert "**1 forward**" in last["tf_summary"] and "One word changed" in last["tf_summary"]
    forcing = last["tf_forcing"]
    assert isinstance(forcing, go.Figure)
    ticks = forcing.layout.xaxis2.ticktext
    assert len(ticks) == 5 and len(forcing.layout.xaxis3.ticktext) == 5  # reference and free running
    kl = last["tf_kl"]
    assert list(kl.data[0].x) == list(range(AT, 6)) and kl.data[0].y[0] == 0
    assert "One word changed" in last["tf_text"] and "proud" in last["tf_text"]
    [trace] = load_traces(lessons.trace("tf"))
    assert [f["name"] for f in trace.data["outputs"]["figures"]] == ["tf_forcing", "tf_kl"]


def test_the_view_says_what_is_wrong_before_running(embedded_lm):
    lessons = Hood(embedded_lm)
    for args, message in (
        (("", REFERENCE, 8, 1, 2, ""), "The prompt is empty"),
        ((PROMPT, "word " * 300, 8, 1, 2, ""), f"at most {MAX_TOKENS} tokens"),
        ((PROMPT, REFERENCE, 8, 9, 2, ""), "Position 9 is past the continuation"),
        ((PROMPT, REFERENCE, 8, 1, 2, "99999"), "outside the vocabulary"),
    ):
        shown = []
        with pytest.raises(PlaygroundError, match=message):
            for views in lessons.run("tf", *args):
                shown.append(views)
        assert [views.keys() for views in shown] == [{"tf_status"}, {"tf_status"}]
        assert shown[0]["tf_status"].startswith("Running") and shown[1]["tf_status"].startswith("Failed")
