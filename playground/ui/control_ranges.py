"""The ranges of the controls that a shared link fills (ui/links.py checks a link's values against
them when the page opens), kept here so that the tabs that build the controls and the links that
fill them share one table (the tabs import links.py, so it can't import them)."""

from __future__ import annotations

# The Step tab's sampling sliders: name, minimum, maximum, default, step (label and one-line lesson:
# the i18n keys step.<name> and step.<name>.info)
STEP_SLIDERS = [
    ("temperature", 0, 2, 1.0, 0.05),
    ("top_k", 0, 200, 0, 1),
    ("top_p", 0.01, 1, 1.0, 0.01),
    ("min_p", 0, 1, 0.0, 0.01),
    ("typical_p", 0.01, 1, 1.0, 0.01),
    ("repetition_penalty", 0.5, 2, 1.0, 0.05),
]

BEAM_LENGTH_PENALTY = (-2.0, 3.0)  # the Beam tab's slider (the engine takes more: LENGTH_PENALTY_RANGE)
COMPARE_TEMPERATURE = (0.0, 2.0)  # Compare's side boxes: the Chat tab's slider's range
