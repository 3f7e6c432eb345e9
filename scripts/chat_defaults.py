"""How often a chat setting answers short factual questions right on the loaded model: the
measurement behind the Chat tab's defaults (README, "Chat tab").

    python scripts/chat_defaults.py    # the tab's defaults (temperature 0.3), greedy and 0.7, seed 0
    python scripts/chat_defaults.py --temperature 0.3 --seeds 0,1,2,3

An answer counts as right when its first 20 tokens name the answer (generation stops there).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.chat import stream_chat
from playground.engine.loading import load_model
from playground.ui.chat_controls import ChatControls

QUESTIONS = [
    ("What is the capital of France?", ["paris"]),
    ("What is the capital of Italy?", ["rome"]),
    ("What is the capital of Japan?", ["tokyo"]),
    ("Who wrote Romeo and Juliet?", ["shakespeare"]),
    ("What is the largest planet in the solar system?", ["jupiter"]),
    ("How many days are in a week?", ["seven", "7"]),
    ("What color is the sky on a clear day?", ["blue"]),
    ("What is the boiling point of water in Celsius?", ["100"]),
    ("What is the capital of Germany?", ["berlin"]),
    ("What is the capital of Spain?", ["madrid"]),
    ("What is 2 + 2?", ["4", "four"]),
    ("Who painted the Mona Lisa?", ["leonardo", "vinci"]),
    ("What gas do plants absorb from the air?", ["carbon dioxide", "co2"]),
    ("How many legs does a spider have?", ["eight", "8"]),
    ("What is the tallest mountain in the world?", ["everest"]),
    ("Which ocean is the largest?", ["pacific"]),
]


def right(engine, question: str, keys: list[str], controls: ChatControls) -> tuple[bool, str]:
    """Whether the answer names one of keys within its first 20 tokens, and that text."""
    text = ""
    for update in stream_chat(engine, controls.request([{"role": "user", "content": question}])):
        text = update.text
        if any(key in text.lower() for key in keys):
            return True, text
    return False, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--temperature", type=float, help="one temperature (default: three settings)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    args = parser.parse_args()
    engine = load_model(device="cpu")
    temperatures = [ChatControls().temperature, 0, 0.7] if args.temperature is None else [args.temperature]
    for temperature in temperatures:
        for seed in args.seeds.split(","):
            controls = replace(ChatControls(), temperature=temperature, seed=seed, max_new_tokens=20)
            results = [right(engine, q, keys, controls) for q, keys in QUESTIONS]
            for (question, _), (ok, text) in zip(QUESTIONS, results, strict=True):
                print(f"  {'right' if ok else 'WRONG'}  {question} -> {text[:70]!r}")
            count = sum(ok for ok, _ in results)
            print(f"temperature {temperature:g}, seed {seed}: {count} of {len(QUESTIONS)} right", flush=True)


if __name__ == "__main__":
    main()
