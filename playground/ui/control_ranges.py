"""The ranges of the controls that a shared link fills (ui/links.py checks a link's values against
them when the page opens), kept here so that the tabs that build the controls and the links that
fill them share one table (the tabs import links.py, so it can't import them)."""

from __future__ import annotations

# The Step tab's sampling sliders: name, label, minimum, maximum, default, step, one-line lesson
STEP_SLIDERS = [
    (
        "temperature",
        "temperature",
        0,
        2,
        1.0,
        0.05,
        "Divides the logits: <1 sharpens, >1 flattens, 0 = top token",
    ),
    ("top_k", "top-k", 0, 200, 0, 1, "Keep only the k most likely tokens (0 = off)"),
    (
        "top_p",
        "top-p",
        0.01,
        1,
        1.0,
        0.01,
        "Keep the fewest top tokens whose probabilities reach p (1 = off)",
    ),
    ("min_p", "min-p", 0, 1, 0.0, 0.01, "Drop tokens less likely than min-p × the top token (0 = off)"),
    (
        "typical_p",
        "typical-p",
        0.01,
        1,
        1.0,
        0.01,
        "Keep tokens whose surprise is near the average (1 = off)",
    ),
    (
        "repetition_penalty",
        "repetition penalty",
        0.5,
        2,
        1.0,
        0.05,
        ">1 makes tokens already in the text less likely (1 = off)",
    ),
]

BEAM_LENGTH_PENALTY = (-2.0, 3.0)  # the Beam tab's slider (the engine takes more: LENGTH_PENALTY_RANGE)
COMPARE_TEMPERATURE = (0.0, 2.0)  # Compare's side boxes: the Chat tab's slider's range
