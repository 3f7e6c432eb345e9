"""Step by step: choose the next token yourself and read the chain-rule ledger."""

from playground.step.export import session_from_dict, session_from_json, session_to_dict, session_to_json
from playground.step.records import Branch, Candidate, LedgerEntry, TextProbability
from playground.step.session import StepSession

__all__ = [
    "Branch",
    "Candidate",
    "LedgerEntry",
    "StepSession",
    "TextProbability",
    "session_from_dict",
    "session_from_json",
    "session_to_dict",
    "session_to_json",
]
