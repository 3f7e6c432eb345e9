"""Record the bundled gallery of traces (docs/traces/) with the embedded model.

    .venv/bin/python scripts/make_traces.py [--out docs/traces] [--lessons order cb]

--lessons records only those Under the hood lessons (by view key), leaving the rest as they are.

Each trace is made by the same handlers the app uses, so replaying one shows what the live
app showed. `python app.py --replay docs/traces` serves them with no model loaded.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.engine.base import Engine
from playground.engine.loading import load_model
from playground.settings import load_settings
from playground.traces import GALLERY
from playground.ui.beam_tab import BeamHandlers
from playground.ui.chat_controls import ChatControls
from playground.ui.chat_tab import ChatHandlers
from playground.ui.hood import VIEWS, HoodTab, build_hood_tab
from playground.ui.hood.tab import run_handler, run_values
from playground.ui.state import TabStates
from playground.ui.step_tab import StepHandlers
from playground.workspace import Workspaces

CAPITAL = "What is the capital of France?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(GALLERY))
    parser.add_argument("--lessons", nargs="*", help="only these lessons' traces (view keys)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = load_model(device="cpu")
    workspaces = Workspaces(engine)
    if args.lessons is None:
        record_tabs(engine, workspaces, out)
    with gr.Blocks():  # the tab's components: its defaults and its figures' labels
        widgets, hood = build_hood_tab(engine, workspaces, TabStates(), VIEWS)
    record_hood(hood, widgets, out, args.lessons)
    print(f"traces in {out}")


def record_tabs(engine: Engine, workspaces: Workspaces, out: Path) -> None:
    """The Chat, Step by step and Beam search traces."""
    chat, step, beam = (
        ChatHandlers(engine, load_settings(), workspaces),
        StepHandlers(engine, workspaces),
        BeamHandlers(engine, workspaces),
    )
    for _ in chat.chat(CAPITAL, [], ChatControls("", 0, 50, 1.0, 0.0, 1.0, 64, "1")):
        pass
    save(chat.chat_trace(), out / "chat-capital-greedy.json")
    for _ in chat.chat("Write a haiku about tokens.", [], ChatControls("", 0.8, 50, 0.95, 0.0, 1.0, 48, "7")):
        pass
    save(chat.chat_trace(), out / "chat-haiku-seed-7.json")
    step.step_start("The capital of France is", False)
    step.step_settings(0.8, 40, 0.95, 0.0, 1.0, 1.0, [])
    step.step_pick_rank(1)
    step.step_pick_rank(3)
    step.step_greedy()
    step.step_sample("5")
    step.step_view(10, "top_p")
    save(step.step_trace(), out / "step-capital.json")
    beam.beam_run(
        "The best thing about beam search is",
        False,
        4,
        12,
        1.0,
        "off",
        2,
        True,
        "png",
        progress=lambda *a, **k: None,
    )
    save(beam.beam_trace(), out / "beam-4x12.json")


def record_hood(hood: HoodTab, widgets: dict, out: Path, only: list[str] | None = None) -> None:
    """One run of each Under the hood lesson (or of those named) with its widgets' default values."""
    tab = SimpleNamespace(session_hash="gallery")
    for view in VIEWS:
        if only is not None and view.key not in only:
            continue
        for _ in run_handler(hood, view)(*run_values(view, widgets), tab):
            pass
        save(hood.trace(view, tab), out / f"hood-{view.key}.json")


def save(path: str, target: Path) -> None:
    shutil.copyfile(path, target)
    print(f"wrote {target} ({target.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
