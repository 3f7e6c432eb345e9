"""The Under the hood tab's handlers as plain functions, the step -> lens move, and the API."""

from __future__ import annotations

import pytest
from hood_helpers import other_tokenizer
from hood_tab_helpers import Hood, request

from playground.errors import PlaygroundError
from playground.settings import load_settings
from playground.step import StepSession
from playground.ui.hood import speculative as spec_view
from tests.conftest import make_tiny_llama

LOOKUP = "prompt lookup (n-grams of the context)"
EARLY = "early exit (the model's first k layers)"
DRAFT = "draft model (--draft-model)"


@pytest.fixture(scope="module")
def hood(embedded_lm):
    return Hood(embedded_lm)


def outputs(hood: Hood, key: str) -> set[str]:
    return set(hood.view(key).all_outputs)


def test_kv_streams_live_figures_then_the_summary(hood):
    updates = list(hood.run("kv", 32, 3))
    assert updates[0] == {"kv_status": "Running: cache on vs off…"}  # at once, before the first forward
    assert len(updates) == 5  # then one per token, then the final view
    assert set(updates[1]) == {"kv_status", "kv_latency", "kv_cumulative", "kv_bytes"}
    assert set(updates[-1]) == outputs(hood, "kv")
    summary = updates[-1]["kv_summary"]
    assert "Tokens: identical ✓" in summary and "exactly the formula ✓" in summary
    assert updates[-1]["kv_status"].startswith("Done: token 3/3")
    names = [trace.name for trace in updates[-1]["kv_latency"].data]
    assert any("KV cache" in str(n) for n in names) and any("whole prefix" in str(n) for n in names)


def test_prefill_vs_decode_table_and_figures(hood):
    final = hood.last("pd", [64, 16], 2)
    assert set(final) == outputs(hood, "pd")
    assert [row[0] for row in final["pd_table"]] == [16, 64]
    assert "memory bandwidth" in final["pd_summary"]
    assert final["pd_throughput"].layout.xaxis.type == "log"


def test_attention_view_and_its_clicks(hood):
    out = hood.last("attn", "The cat sat on the mat.", 15, 2, session="a")
    assert set(out) == outputs(hood, "attn")
    assert "attention sink" in out["attn_summary"] and "eager attention" in out["attn_status"]
    assert out["attn_position"]["value"] == out["attn_position"]["maximum"] == 6  # the last of 7 tokens
    attention = hood.view("attn")
    clicked = attention.cell(hood.tab, "3,4:1700000000", "The cat sat on the mat.", 2, request("a"))
    assert (clicked["attn_layer"]["value"], clicked["attn_head"]["value"]) == (3, 4)
    assert "layer 3, head 4" in clicked["attn_map"].layout.title.text
    focus = attention.focus(hood.tab, "The cat sat on the mat.", 30, 9, 1, request("a"))
    assert "query 1" in focus["attn_row"].layout.title.text
    with pytest.raises(PlaygroundError, match="Not a grid cell"):
        attention.cell(hood.tab, "nonsense", "The cat", 0, request("a"))


def test_over_long_attention_text_is_refused(hood):
    with pytest.raises(PlaygroundError, match="at most 256 tokens and this text has"):
        hood.last("attn", "word " * 400, 1, 1, session="b")


def test_lens_view_candidates_and_clicks(hood, embedded_lm):
    out = hood.last("lens", "The capital of France is", False, [])
    assert set(out) == outputs(hood, "lens") and "Next token: **␣Paris**" in out["lens_summary"]
    ids = out["lens_ids"]
    lens = hood.view("lens")
    picked = lens.pick(hood.tab, "4528:99", ids, [])  # ' London', clicked in the top-tokens chart
    assert picked["lens_candidates"]["value"] == [4528]
    assert [trace.name for trace in picked["lens_tracks"].data][:3:2] == ["␣Paris (chosen)", "␣London"]
    with pytest.raises(PlaygroundError, match="Run the lens first"):
        lens.candidates(hood.tab, [], [4528])


def test_lens_for_step_reads_the_step_session(hood, embedded_lm):
    workspace = hood.workspaces.get("step-tab")
    with pytest.raises(PlaygroundError, match="No step-by-step session yet"):
        hood.view("lens").at_step(hood.tab, request("step-tab"))
    session = workspace.use_step(StepSession(embedded_lm, "The capital of France is"))
    session.greedy(1)
    out = hood.view("lens").at_step(hood.tab, request("step-tab"))
    assert out["lens_ids"] == session.ids and out["lens_text"].endswith(session.text)
    assert (
        out["lens_status"].startswith("From the Step tab")
        and out["hood_views"].selected == "hood-group-inside"
    )
    assert out["hood_group_inside"].selected == "hood-lens"


def test_speculative_view_shows_rounds_and_the_parity_verdict(hood):
    copy_task = next(iter(spec_view.PRESETS.values()))
    updates = list(hood.run("spec", copy_task, True, LOOKUP, 6, 20, 12, 0, "0"))
    final = updates[-1]
    assert set(final) == outputs(hood, "spec")
    assert updates[1]["spec_status"].startswith("Running: plain decoding")
    assert "Identical to plain greedy decoding ✓" in final["spec_summary"]
    assert "accepted draft" in final["spec_rounds"] and final["spec_checks"]


def test_speculative_bad_input_from_the_ui(hood, embedded_lm):
    with pytest.raises(PlaygroundError, match="Early exit needs k between 1 and 29"):
        hood.last("spec", "hi", True, EARLY, 4, 30, 8, 0, "0")
    with pytest.raises(PlaygroundError, match="Draft length must be a whole number from 1 to 16"):
        hood.last("spec", "hi", True, LOOKUP, 20, 10, 8, 0, "0")
    with pytest.raises(PlaygroundError, match="No draft model is loaded: start the app with --draft-model"):
        hood.last("spec", "hi", True, DRAFT, 4, 10, 8, 0, "0")
    stranger = make_tiny_llama(other_tokenizer(), vocab_size=5)
    other = Hood(embedded_lm, draft=stranger)
    with pytest.raises(PlaygroundError, match="different tokenizer"):
        other.last("spec", "hi", True, DRAFT, 4, 10, 8, 0, "0")


def test_draft_model_from_the_ui(embedded_lm):
    draft = make_tiny_llama(embedded_lm.tokenizer, seed=3)
    final = Hood(embedded_lm, draft=draft).last("spec", "Say hi.", True, DRAFT, 2, 10, 8, 0, "0")
    assert "**draft model (--draft-model)**" in final["spec_summary"] and "Identical" in final["spec_summary"]


def test_batching_view(hood):
    final = hood.last("batch", "What is 2+2?\nName a colour.\nSay hi.", 2, 4, True)
    assert set(final) == outputs(hood, "batch")
    assert [row[1] for row in final["batch_table"]] == ["What is 2+2?", "Name a colour."]
    assert all(row[3] == "✓" for row in final["batch_table"])
    assert "Every sequence's tokens equal its solo run ✓" in final["batch_summary"]
    with pytest.raises(PlaygroundError, match="3 prompts asked for but only 2 given"):
        hood.last("batch", "a\nb", 3, 4, True)
    with pytest.raises(PlaygroundError, match="number of prompts must be a whole number from 1 to 16"):
        hood.last("batch", "a\n" * 20, 17, 4, True)


def test_quantization_view_streams_each_format_then_forks_and_the_table(hood):
    text = "The capital of France is Paris, and the capital of Italy is"
    updates = list(hood.run("quant", text, ["hqq2", "kv-int4"], 3))
    phases = [u["quant_status"] for u in updates if "quant_status" in u]
    assert any("reference (float32)" in p for p in phases) and any("1/2 HQQ 2-bit" in p for p in phases)
    final = updates[-1]
    assert set(final) == outputs(hood, "quant")
    table = final["quant_table"]
    assert [row[0] for row in table] == ["float32 (the loaded model)", "HQQ 2-bit", "KV int4 (quanto)"]
    assert table[1][2] == 3.0 and table[1][3] < table[0][3]  # 3 bits per weight with scales, fewer MB
    assert "Q4_1" in final["quant_summary"] and "HQQ 2-bit</b> parts at token 1" in final["quant_fork"]
    assert "equal the KV tab's formula" in final["quant_summary"]
    with pytest.raises(PlaygroundError, match="The text is empty"):
        hood.last("quant", "  ", ["hqq4"], 3)
    with pytest.raises(PlaygroundError, match="Choose at least one format"):
        hood.last("quant", "Hello", [], 3)


def test_api_endpoints_are_named(app_client):
    endpoints = app_client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    names = ["kv_on_off", "prefill_decode", "attention", "attention_focus", "lens", "lens_candidates"]
    for name in [*names, "lens_step", "speculative", "batching"]:
        assert f"/hood_{name}" in endpoints
    parameters = [p["parameter_name"] for p in endpoints["/hood_speculative"]["parameters"]]
    assert parameters[:3] == ["spec_prompt", "spec_chat", "spec_method"]


def test_api_lens_and_a_clear_error(app_client):
    result = app_client.predict("The capital of France is", False, [], api_name="/hood_lens")
    assert "Paris" in result[1]
    with pytest.raises(Exception, match="at most 256 tokens"):
        app_client.predict("word " * 400, 1, 1, api_name="/hood_attention")


def test_stop_ends_the_run_quietly_and_says_so(tiny_lm):
    hood = Hood(tiny_lm)
    run = hood.run("kv", 400, 60, session="s")
    assert next(run) == {"kv_status": "Running: cache on vs off…"}
    assert next(run)["kv_status"].startswith("Running: token 1/60")
    stopped = hood.stop("kv", session="s")
    assert stopped == {"kv_status": "Stopped by you: press Run to start again.", "kv_summary": ""}
    assert list(run) == [stopped]  # no error (no red toast): the run ends at its next step, saying so
    assert not hood.workspaces.get("s").running  # a finished run forgets its control
    nothing = hood.stop("kv", session="nobody")  # nothing running: harmless, nothing changes
    assert nothing == {"kv_status": {"__type__": "update"}, "kv_summary": {"__type__": "update"}}


def test_a_closed_tab_cancels_its_running_view(tiny_lm):
    hood = Hood(tiny_lm)
    run = hood.run("kv", 400, 60, session="closing")
    next(run), next(run)
    hood.workspaces.release("closing")  # what the page's unload does
    assert [update["kv_status"] for update in run] == ["Stopped by you: press Run to start again."]


def test_stop_drops_a_run_still_waiting_in_the_queue_and_not_the_next_one(tiny_lm):
    """Run then Stop while the run waits for the model: Stop drops its ticket, so when its turn
    comes it ends before it began, saying so (no model work, no error); a later Run's run runs."""
    hood = Hood(tiny_lm)
    waiting = hood.ticket("kv", session="s")
    stopped = hood.stop("kv", session="s")
    assert stopped == {"kv_status": "Stopped by you: press Run to start again.", "kv_summary": ""}
    assert list(hood.run("kv", 400, 60, session="s", ticket=waiting)) == [stopped]
    again = hood.stop("kv", session="s")  # nothing running or waiting now: nothing changes
    assert again == {"kv_status": {"__type__": "update"}, "kv_summary": {"__type__": "update"}}
    later = hood.ticket("kv", session="s")
    assert later > waiting
    updates = list(hood.run("kv", 100, 3, session="s", ticket=later))
    assert updates[-1]["kv_status"].startswith("Done") and not hood.workspaces.get("s").running


def test_a_failed_run_says_so_in_its_status_line(tiny_lm):
    hood = Hood(tiny_lm)
    run = hood.run("pd", [], 2)
    assert next(run) == {"pd_status": "Running: prefill vs decode…"}
    assert next(run) == {"pd_status": "Failed: Give at least one prompt length."}
    with pytest.raises(PlaygroundError, match="at least one prompt length"):
        next(run)


def test_draft_model_option_and_a_tokenizer_mismatch_at_start_up(tmp_path, tiny_lm, monkeypatch):
    import app

    assert app.parse_args(["--draft-model", "some/model"]).draft_model == "some/model"
    monkeypatch.setenv("PLAYGROUND_DRAFT_MODEL", "other/model")
    assert app.parse_args([]).draft_model == "other/model"
    monkeypatch.delenv("PLAYGROUND_DRAFT_MODEL")
    assert app.create_draft(load_settings(draft_model=None), tiny_lm) is None
    stranger = make_tiny_llama(other_tokenizer(), vocab_size=5)
    stranger.model.save_pretrained(tmp_path)
    stranger.tokenizer.save_pretrained(tmp_path)
    settings = load_settings(draft_model=str(tmp_path), device="cpu")
    with pytest.raises(PlaygroundError, match="has a different tokenizer"):
        app.create_draft(settings, tiny_lm)
