"""Recorded traces: one versioned JSON file per run of a tab, replayed with no model loaded.

A trace holds the data a view is drawn from (a chat answer with every token's record, a step
session's snapshot, a beam search tree, an "Under the hood" run), plus what made it (model,
engine, settings, when). `python app.py --replay FILE_OR_DIR` serves traces in seconds, each
view marked "recorded". A file from elsewhere, a corrupt one or one from a newer version of the
app is refused with a message that says which (in a folder it is skipped, and named).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from playground.errors import PlaygroundError
from playground.messages import Message

TRACE_FORMAT = "llm-playground/trace"
TRACE_VERSION = 1
KINDS = ("chat", "step", "beam", "hood")
MAX_TRACE_BYTES = 64 * 2**20  # a 16-beam x 64-step tree is a few MB; refuse anything far larger unread
GALLERY = Path(__file__).resolve().parents[1] / "docs" / "traces"  # the bundled traces (make_traces.py)


@dataclass
class Trace:
    kind: str  # one of KINDS
    title: str  # what the trace list shows
    model: str  # the model that produced every number
    engine: str  # "transformers", "llama.cpp", ...
    created: str  # ISO 8601, UTC
    data: dict[str, Any]  # the view's data (see the kind's to_dict)
    version: int = TRACE_VERSION

    def to_json(self) -> str:
        return json.dumps({"format": TRACE_FORMAT, **asdict(self)}, ensure_ascii=False)


def new_trace(kind: str, title: str, engine: Any, data: dict[str, Any]) -> Trace:
    """A trace of a run made now on `engine`."""
    if kind not in KINDS:
        raise PlaygroundError(f"Unknown trace kind {kind!r}: use one of {', '.join(KINDS)}.")
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return Trace(
        kind, title, str(getattr(engine, "name", "?")), str(getattr(engine, "kind", "?")), created, data
    )


def save_trace(trace: Trace, folder: Path) -> Path:
    """Write the trace as `<kind>-<time>.json` in folder (made if missing); returns the path."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = trace.created.replace(":", "").replace("-", "")
    path = folder / f"{trace.kind}-{stamp}-{abs(hash(trace.title)) % 10**6:06d}.json"
    path.write_text(trace.to_json(), encoding="utf-8")
    return path


def read_trace(text: str, where: str) -> Trace:
    """A trace from its JSON; a foreign, corrupt or newer file gets a message saying which."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PlaygroundError(
            "{where} is not a trace: not valid JSON ({why}).",
            key="trace.error.not_json",
            where=where,
            why=str(exc),
        ) from exc
    if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
        raise PlaygroundError(
            "{where} is not a playground trace (its 'format' is not {format!r}).",
            key="trace.error.format",
            where=where,
            format=TRACE_FORMAT,
        )
    version = data.get("version")
    if not isinstance(version, int) or version < 1:
        raise PlaygroundError(
            "{where} is a corrupt trace: its version {version!r} is not a whole number.",
            key="trace.error.version",
            where=where,
            version=version,
        )
    if version > TRACE_VERSION:
        raise PlaygroundError(
            "{where} was recorded by a newer version of the playground (trace version {version}; this one "
            "reads up to {readable}). Update the app to replay it.",
            key="trace.error.newer",
            where=where,
            version=version,
            readable=TRACE_VERSION,
        )
    missing = [name for name in ("kind", "title", "model", "engine", "created", "data") if name not in data]
    if missing or data["kind"] not in KINDS or not isinstance(data["data"], dict):
        if missing:
            raise PlaygroundError(
                "{where} is a corrupt trace: missing {names}.",
                key="trace.error.missing",
                where=where,
                names=", ".join(missing),
            )
        raise PlaygroundError(
            "{where} is a corrupt trace: kind {kind!r} or its data is not valid.",
            key="trace.error.kind",
            where=where,
            kind=data["kind"],
        )
    text = {name: str(data[name]) for name in ("title", "model", "engine", "created")}
    return Trace(
        data["kind"], text["title"], text["model"], text["engine"], text["created"], data["data"], version
    )


def load_traces(path: str | Path) -> list[Trace]:
    """Every trace in a file or a folder (its *.json files, sorted); a bad file is refused, named."""
    return [_read_file(file) for file in _trace_files(Path(path).expanduser())]


def gallery_trace(name: str) -> Trace | None:
    """The bundled trace docs/traces/<name> (None when this install has no such readable file)."""
    try:
        return _read_file(GALLERY / name)
    except (OSError, PlaygroundError):
        return None


def load_gallery(
    path: str | Path, check: Callable[[Trace], Any] | None = None
) -> tuple[list[Trace], list[str]]:
    """What `--replay` serves: the traces of a file or a folder, and why each file of the folder
    that is not one (or that `check` refuses: its data does not draw) was skipped. A single file is
    refused, and so is a folder with no good trace."""
    root = Path(path).expanduser()
    traces, skipped = [], []
    for file in _trace_files(root):
        try:
            trace = _read_file(file)
            if check is not None:
                check(trace)
        except PlaygroundError as exc:
            if not root.is_dir():
                raise
            named = str(file) in str(exc)
            why = exc.message
            skipped.append(
                why if named else Message("trace.skipped_file", "{file}: {why}", file=str(file), why=why)
            )
        else:
            traces.append(trace)
    if not traces:
        raise PlaygroundError(
            "The folder {root} has no trace to replay: {why}",
            key="trace.error.none_good",
            root=str(root),
            why=skipped,
        )
    return traces, skipped


def _trace_files(root: Path) -> list[Path]:
    if not root.exists():
        raise PlaygroundError(
            "No file or folder {root} to replay.", key="trace.error.no_path", root=str(root)
        )
    files = sorted(root.glob("*.json")) if root.is_dir() else [root]
    if not files:
        raise PlaygroundError(
            "The folder {root} has no .json traces to replay.", key="trace.error.empty_folder", root=str(root)
        )
    return files


def _read_file(file: Path) -> Trace:
    if file.stat().st_size > MAX_TRACE_BYTES:
        raise PlaygroundError(
            "{file} is over {mib} MiB: not a trace.",
            key="trace.error.too_big",
            file=str(file),
            mib=MAX_TRACE_BYTES // 2**20,
        )
    return read_trace(file.read_text(encoding="utf-8", errors="replace"), str(file))


def decode_data(trace: Trace, decoders: dict[str, Callable[[dict[str, Any]], Any]]) -> Any:
    """The trace's data as its kind's object; a trace whose data does not fit is called corrupt."""
    try:
        return decoders[trace.kind](trace.data)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise PlaygroundError(
            "The {kind} trace {title!r} is corrupt: {why}.",
            key="trace.error.corrupt_data",
            kind=trace.kind,
            title=trace.title,
            why=repr(exc),
        ) from exc
