"""Values outside a control's range: named with the control and its range, never changed without a
word, never Gradio's own "Value -5 is less than minimum value 1." (issue 33, items 1 and 2)."""

from __future__ import annotations

import pytest
from gradio_client import Client

from playground.errors import PlaygroundError
from playground.ui.i18n import i18n, localize, t
from playground.ui.ranges import (
    CheckedNumber,
    CheckedSlider,
    UncheckedNumber,
    checked_value,
    clamp_message,
    range_text,
)

GRADIOS_OWN = ("less than minimum value", "greater than maximum value", "Something went wrong")


def test_a_checked_control_names_itself_its_range_and_the_value():
    steps = CheckedNumber(8, precision=0, minimum=1, maximum=512, label="N")
    assert steps.preprocess(-3) == -3  # no Gradio check: its message names nothing, with a traceback
    with pytest.raises(PlaygroundError, match=r"N -3 is outside its range 1–512\.") as refused:
        steps.checked(-3)
    assert localize(refused.value.message, "zh") == "N -3 超出范围 1–512。"
    with pytest.raises(PlaygroundError, match=r"N must be a whole number, got 2\.5"):
        steps.checked(2.5)  # Gradio would round it to 2 without a word
    with pytest.raises(PlaygroundError, match=r"N must be a number, got 'lots'"):
        steps.checked("lots")
    assert steps.checked(512) == 512 and steps.checked("7") == 7 and steps.checked(None) is None
    layer = CheckedSlider(1, 30, value=15, step=1, label="early exit: k layers")
    with pytest.raises(PlaygroundError, match=r"Early exit: k layers 31 is outside its range 1–30\."):
        layer.checked(31)
    assert layer.checked(0.5 + 29) == 29.5  # a slider without precision keeps its value
    batch = CheckedNumber(1, minimum=1, label=i18n("kv.batch"))  # a translated label: said in Chinese
    with pytest.raises(PlaygroundError) as refused:
        checked_value(batch, -5)
    assert str(refused.value) == "Batch -5 is outside its range at least 1."
    assert localize(refused.value.message, "zh") == f"{t('kv.batch', 'zh')} -5 超出范围 至少 1。"
    assert UncheckedNumber(1, minimum=1).preprocess(-5) == -5  # the handler explains it itself


def test_range_words():
    assert range_text(1, 512) == "1–512" and range_text(1, None) == "at least 1"
    assert range_text(None, 8) == "at most 8"
    temperature = CheckedSlider(0, 2, value=1, label="Temperature")
    assert clamp_message(temperature, "5") == "Temperature 5 is outside its range 0–2: set to 2."
    assert clamp_message(temperature, "5", "zh") == "Temperature 5 超出范围 0–2：已设为 2。"
    assert clamp_message(temperature, 1.5) is None and clamp_message(temperature, "") is None


def ranged_controls(client: Client) -> dict[int, tuple[str, int, dict]]:
    """Every number box and slider that a public API endpoint reads: component id -> (the first such
    endpoint, the control's place among its inputs, the control's config)."""
    config = client.config
    components = {c["id"]: c for c in config["components"]}
    found: dict[int, tuple[str, int, dict]] = {}
    for dependency in config["dependencies"]:
        if not dependency.get("api_name") or dependency.get("api_visibility") == "private":
            continue
        for place, component_id in enumerate(dependency["inputs"]):
            if components[component_id]["type"] in ("number", "slider") and component_id not in found:
                found[component_id] = (dependency["api_name"], place, components[component_id])
    return found


def default_value(component: dict) -> object:
    """What the page sends for a component untouched (a message to send, for the chat's box)."""
    return "Hi" if component["props"].get("elem_id") == "chat-message" else component["props"].get("value")


def answer_to(client: Client, api_name: str, values: list) -> str:
    """The endpoint's error message, or its first text output (the KV calculator explains inline)."""
    try:
        result = client.predict(*values, api_name=f"/{api_name}")
    except Exception as exc:  # gradio_client's AppError carries the toast's text
        return str(exc)
    outputs = result if isinstance(result, (list, tuple)) else [result]
    return next((o for o in outputs if isinstance(o, str) and "lots" in o), str(outputs))


def test_every_number_box_and_slider_of_every_tab_names_a_bad_value(launched_app):
    """Through the API (what a link, a script or a stale page sends): text where a number belongs is
    refused by every control, with the value named, before anything runs."""
    client = Client(launched_app, verbose=False)  # its own session: the shared client's state stays
    controls = ranged_controls(client)
    assert len(controls) >= 40, len(controls)  # every tab's controls, the lessons' too
    components = {c["id"]: c for c in client.config["components"]}
    for api_name, place, control in controls.values():
        dependency = next(d for d in client.config["dependencies"] if d.get("api_name") == api_name)
        values = [default_value(components[i]) for i in dependency["inputs"]]
        values[place] = "lots"
        message = answer_to(client, api_name, values)
        label = control["props"].get("label")
        assert "'lots'" in message, (api_name, label, message)  # the bad value, named
        assert not any(words in message for words in GRADIOS_OWN), (api_name, label, message)


def test_out_of_range_numbers_are_named_with_their_range(app_client):
    with pytest.raises(Exception, match="N -3 is outside its range 1–512"):
        app_client.predict(-3, "", api_name="/step_run")
    with pytest.raises(Exception, match="Candidates in the chart 100 is outside its range 5–40"):
        app_client.predict(100, "raw", api_name="/step_view")
    summary, *_ = app_client.predict(
        "Llama-3.1-8B", "{}", -5, 1, "float16", "ideal", 80, "bfloat16", None, 10, api_name="/kv_calculate"
    )
    assert summary.startswith("**Can't calculate:** Sequence length must be a positive whole number, got -5")


def test_a_value_the_app_would_change_is_refused_or_told(app_client):
    """Early exit at k = all 30 layers is refused with its range (it ran as 29 without a word); a
    query position past a shorter text shows the last token and says so."""
    early_exit = "early exit (the model's first k layers)"
    with pytest.raises(Exception, match=r"Early exit needs k between 1 and 29 layers .* got 30"):
        app_client.predict("Hello", False, early_exit, 4, 30, 8, 0, "0", api_name="/hood_speculative")
    app_client.predict("The cat sat on the mat.", 15, 1, api_name="/hood_attention")
    status, *_ = app_client.predict("The cat sat.", 15, 1, 6, api_name="/hood_attention_focus")
    assert "Query position 6 is outside this text's range 0–" in status and ": showing " in status, status
