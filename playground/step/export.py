"""Save a step-by-step session as JSON and replay it (every number is recomputed on replay); a
recorded step trace holds such a session too, and replays the same way.

The format (version 1) stores token ids only, so a file made with another engine or model
replays with this one's numbers; a different tokenizer is caught by the prompt's ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from playground.engine.base import Engine
from playground.engine.records import SOURCES
from playground.engine.sampling import validate_settings
from playground.errors import PlaygroundError
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
        raise PlaygroundError("This session was made with another tokenizer: its prompt tokens differ.")
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
        raise PlaygroundError(f"Not a JSON file: {exc}") from exc
    if isinstance(data, dict) and data.get("format") == TRACE_FORMAT:
        data = _trace_session(text)
    return session_from_dict(engine, data)


def _trace_session(text: str) -> Any:
    """The exported session inside a recorded step trace; another kind of trace is named."""
    trace = read_trace(text, "This file")
    if trace.kind != "step":
        raise PlaygroundError(
            f"This file is a recorded {trace.kind} trace: Step by step imports sessions and step traces "
            "(serve any trace with --replay)."
        )
    if "session" not in trace.data:
        raise PlaygroundError("This step trace holds no session to replay: it has only its views.")
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

    def fail(why: str) -> PlaygroundError:
        return PlaygroundError(f"Not a valid step-by-step session file: {why}")

    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise fail(f"'format' must be {EXPORT_FORMAT!r}")
    if data.get("version") != EXPORT_VERSION:
        raise fail(f"unsupported version {data.get('version')!r} (expected {EXPORT_VERSION})")
    if not isinstance(data.get("prompt"), str) or not isinstance(data.get("chat"), bool):
        raise fail("'prompt' must be text and 'chat' true or false")
    if not isinstance(data.get("prompt_ids"), list):
        raise fail("'prompt_ids' must be a list of token ids")
    conversation = data.get("conversation")
    if conversation is not None and not _is_conversation(conversation):
        raise fail("'conversation' must be a list of {role, content} messages")
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise fail("'nodes' must be a list")
    known = {ROOT}
    for node in nodes:
        _check_node(node, known, fail)
        known.add(node["id"])
    if data.get("current") not in known:
        raise fail(f"'current' node {data.get('current')!r} is not in the tree")
    return {**data, "settings": validate_settings(data.get("settings"))}


def _is_conversation(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in value
    )


def _check_node(node: Any, known: set[int], fail: Callable[[str], PlaygroundError]) -> None:
    if not isinstance(node, dict):
        raise fail(f"a node must be an object, got {node!r}")
    for name in ("id", "parent", "token_id"):
        if not isinstance(node.get(name), int) or isinstance(node.get(name), bool):
            raise fail(f"node field {name!r} must be an integer in {node!r}")
    if node["id"] in known:
        raise fail(f"node id {node['id']} appears twice")
    if node["parent"] not in known:
        raise fail(f"node {node['id']} has parent {node['parent']}, which comes later or does not exist")
    if node.get("source") not in SOURCES:
        raise fail(f"node {node['id']} has source {node.get('source')!r}; expected one of {SOURCES}")
    sampled = node.get("sampled_prob")
    if sampled is not None and not (isinstance(sampled, (int, float)) and 0 <= sampled <= 1):
        raise fail(f"node {node['id']} has sampled_prob {sampled!r}; expected null or a probability")
