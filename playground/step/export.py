"""Save a step-by-step session as JSON and replay it (every number is recomputed on replay); a
recorded step trace holds such a session too, and replays the same way.

The format (version 1) stores token ids only, so a file made with another engine or model
replays with this one's numbers; a different tokenizer is caught by the prompt's ids.
"""

from __future__ import annotations

import json
from typing import Any

from playground.engine.base import Engine
from playground.engine.records import SOURCES
from playground.engine.sampling import validate_settings
from playground.errors import PlaygroundError
from playground.messages import Message
from playground.step.session import StepSession
from playground.traces import TRACE_FORMAT, read_trace
from playground.tree import ROOT

EXPORT_FORMAT = "llm-playground/step-session"
EXPORT_VERSION = 1


def session_to_dict(session: StepSession) -> dict[str, Any]:
    """Everything needed to replay the session: prompt, chat flag, tree, current tip, settings."""
    with session.locked():
        nodes = [
            {
                "id": n.id,
                "parent": n.parent,
                "token_id": n.token.id,
                "source": n.token.source,
                "sampled_prob": n.token.sampled_prob,
            }
            for n in session.tree.nodes[1:]
        ]
        data = {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "model": session.engine.name,
            "prompt": session.prompt,
            "chat": session.chat,
            "prompt_ids": list(session.prompt_ids),
            "settings": session.settings.to_dict(),
            "nodes": nodes,
            "current": session.tip,
        }
        if session.conversation is not None:
            data["conversation"] = session.conversation
            data["system_prompt"] = session.system_prompt
        return data


def session_to_json(session: StepSession) -> str:
    return json.dumps(session_to_dict(session), indent=1)


def session_from_dict(engine: Engine, data: Any) -> StepSession:
    """Replay an exported session (recomputes every probability and the cache)."""
    checked = _check_export(data)
    session = StepSession(
        engine,
        checked["prompt"],
        checked["chat"],
        settings=checked["settings"],
        conversation=checked.get("conversation"),
        system_prompt=checked.get("system_prompt"),
    )
    if session.prompt_ids != checked["prompt_ids"]:
        raise PlaygroundError(
            "This session was made with another tokenizer: its prompt tokens differ.",
            key="step.error.tokenizer",
        )
    try:
        with session.locked():
            id_map = _replay(session, checked["nodes"])
            session.switch_to(id_map[checked["current"]])
    except BaseException:
        session.release()
        raise
    return session


def session_from_json(engine: Engine, text: str) -> StepSession:
    """Replay an exported session, or the session a recorded step trace holds (Save trace)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PlaygroundError("Not a JSON file: {why}", key="step.error.not_json", why=str(exc)) from exc
    if isinstance(data, dict) and data.get("format") == TRACE_FORMAT:
        data = _trace_session(text)
    return session_from_dict(engine, data)


def _trace_session(text: str) -> Any:
    """The exported session inside a recorded step trace; another kind of trace is named."""
    trace = read_trace(text, Message("trace.this_file", "This file"))
    if trace.kind != "step":
        raise PlaygroundError(
            "This file is a recorded {kind} trace: Step by step imports sessions and step traces "
            "(serve any trace with --replay).",
            key="step.error.other_trace",
            kind=trace.kind,
        )
    if "session" not in trace.data:
        raise PlaygroundError(
            "This step trace holds no session to replay: it has only its views.", key="step.error.no_session"
        )
    return trace.data["session"]


def _replay(session: StepSession, nodes: list[dict[str, Any]]) -> dict[int, int]:
    """Rebuild the tree depth first (each parent is at most a crop away); returns the map from
    the file's node ids to this session's."""
    children: dict[int, list[dict[str, Any]]] = {}
    for node in nodes:
        children.setdefault(node["parent"], []).append(node)
    id_map = {ROOT: ROOT}
    stack = list(reversed(children.get(ROOT, [])))
    while stack:
        node = stack.pop()
        session.switch_to(id_map[node["parent"]])
        session.append_tokens([node["token_id"]])
        record = session.tree.nodes[session.tip].token
        record.source, record.sampled_prob = node["source"], node["sampled_prob"]
        id_map[node["id"]] = session.tip
        stack.extend(reversed(children.get(node["id"], [])))
    return id_map


def _check_export(data: Any) -> dict[str, Any]:
    """Validate an exported session; the error says what is wrong."""

    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise _invalid(Message("step.file.format", "'format' must be {format!r}", format=EXPORT_FORMAT))
    if data.get("version") != EXPORT_VERSION:
        raise _invalid(
            Message(
                "step.file.version",
                "unsupported version {version!r} (expected {expected})",
                version=data.get("version"),
                expected=EXPORT_VERSION,
            )
        )
    if not isinstance(data.get("prompt"), str) or not isinstance(data.get("chat"), bool):
        raise _invalid(Message("step.file.prompt", "'prompt' must be text and 'chat' true or false"))
    if not isinstance(data.get("prompt_ids"), list):
        raise _invalid(Message("step.file.prompt_ids", "'prompt_ids' must be a list of token ids"))
    conversation = data.get("conversation")
    if conversation is not None and not _is_conversation(conversation):
        raise _invalid(
            Message("step.file.conversation", "'conversation' must be a list of {{role, content}} messages")
        )
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise _invalid(Message("step.file.nodes", "'nodes' must be a list"))
    known = {ROOT}
    for node in nodes:
        _check_node(node, known)
        known.add(node["id"])
    if data.get("current") not in known:
        raise _invalid(
            Message(
                "step.file.current",
                "'current' node {node!r} is not in the tree",
                node=data.get("current"),
            )
        )
    return {**data, "settings": validate_settings(data.get("settings"))}


def _is_conversation(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in value
    )


def _invalid(why: Message) -> PlaygroundError:
    """The refusal of a file that is not a valid exported session, saying what is wrong."""
    return PlaygroundError(
        "Not a valid step-by-step session file: {why}",
        key="step.error.invalid_file",
        why=why,
    )


def _check_node(node: Any, known: set[int]) -> None:
    if not isinstance(node, dict):
        raise _invalid(Message("step.file.node", "a node must be an object, got {node!r}", node=node))
    for name in ("id", "parent", "token_id"):
        if not isinstance(node.get(name), int) or isinstance(node.get(name), bool):
            raise _invalid(
                Message(
                    "step.file.node_field",
                    "node field {name!r} must be an integer in {node!r}",
                    name=name,
                    node=node,
                )
            )
    if node["id"] in known:
        raise _invalid(Message("step.file.twice", "node id {id} appears twice", id=node["id"]))
    if node["parent"] not in known:
        raise _invalid(
            Message(
                "step.file.parent",
                "node {id} has parent {parent}, which comes later or does not exist",
                id=node["id"],
                parent=node["parent"],
            )
        )
    if node.get("source") not in SOURCES:
        raise _invalid(
            Message(
                "step.file.source",
                "node {id} has source {source!r}; expected one of {sources}",
                id=node["id"],
                source=node.get("source"),
                sources=str(SOURCES),
            )
        )
    sampled = node.get("sampled_prob")
    if sampled is not None and not (isinstance(sampled, (int, float)) and 0 <= sampled <= 1):
        raise _invalid(
            Message(
                "step.file.sampled",
                "node {id} has sampled_prob {sampled!r}; expected null or a probability",
                id=node["id"],
                sampled=sampled,
            )
        )
