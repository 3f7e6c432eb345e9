"""Shareable links: the URL's query carries the tab, the prompt, the settings, the seed and the
view, and opening it rebuilds the same state (a seeded or greedy answer comes out the same).

Pure functions from component values to a query string and back; the wiring (page load, the
"Copy link" button) is in playground/ui/app.py. Each tab's parameters are short, named, and
validated on the way in, so a hand-edited link gets a clear message, never a stack trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from playground.engine.sampling import DEFAULT_ORDER
from playground.errors import PlaygroundError

TABS = ("chat", "step", "beam", "kv", "hood")


@dataclass(frozen=True)
class Param:
    """One query parameter: its short name in the URL, the component it fills, how to read it."""

    key: str  # in the URL
    widget: str  # the component's name in its tab's widgets
    parse: Callable[[str], Any]


def _number(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(text)
    return value


def _whole(text: str) -> int:
    return int(text)


def _flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(text)
    return text == "1"


def _order(text: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    if not set(names) <= set(DEFAULT_ORDER):
        raise ValueError(text)
    return names


def _ids(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


SAMPLING = [
    Param("t", "temperature", _number),
    Param("k", "top_k", _whole),
    Param("p", "top_p", _number),
    Param("minp", "min_p", _number),
    Param("rep", "repetition_penalty", _number),
]
PARAMS: dict[str, list[Param]] = {
    "chat": [
        Param("q", "message", str),
        Param("sys", "system_prompt", str),
        *SAMPLING,
        Param("max", "max_new_tokens", _whole),
        Param("seed", "seed", str),
    ],
    "step": [
        Param("prompt", "prompt", str),
        Param("chat", "chat", _flag),
        *SAMPLING,
        Param("typ", "typical_p", _number),
        Param("order", "order", _order),
        Param("seed", "seed", str),
        Param("cands", "candidates", _whole),
        Param("stage", "stage", str),
        Param("path", "path", _ids),  # the generated token ids after the prompt
    ],
    "beam": [
        Param("prompt", "prompt", str),
        Param("chat", "chat", _flag),
        Param("beams", "beams", _whole),
        Param("steps", "steps", _whole),
        Param("lp", "length_penalty", _number),
        Param("es", "early_stopping", str),
        Param("node", "node", _whole),
    ],
    "kv": [
        Param("preset", "preset", str),
        Param("seq", "seq_len", _whole),
        Param("batch", "batch", _whole),
        Param("kvdtype", "kv_dtype", str),
        Param("mode", "mode", str),
        Param("gpu", "gpu_gb", _number),
        Param("wdtype", "weights_dtype", str),
    ],
    "hood": [Param("view", "view", str)],
}


@dataclass(frozen=True)
class Link:
    """What a shared link asks for: the tab, and values by component name for that tab."""

    tab: str
    values: dict[str, Any]

    @property
    def runs(self) -> bool:
        """The link reproduces a result (an answer, a path, a search), not only settings."""
        return {"chat": "message", "step": "prompt", "beam": "prompt"}.get(self.tab, "") in self.values


def read_link(query: Mapping[str, str]) -> Link | None:
    """The link in a page's query parameters (None when it names no tab); a bad value is named."""
    tab = query.get("tab")
    if not tab:
        return None
    if tab not in TABS:
        raise PlaygroundError(f"This link names an unknown tab {tab!r}: use one of {', '.join(TABS)}.")
    values: dict[str, Any] = {}
    for param in PARAMS[tab]:
        if param.key in query:
            try:
                values[param.widget] = param.parse(query[param.key])
            except ValueError:
                what = param.widget.replace("_", " ")
                raise PlaygroundError(
                    f"This link's {param.key}={query[param.key]!r} is not a valid {what}."
                ) from None
    return Link(tab, values)


def link_of(request: Any) -> Link | None:
    """The link the page was opened with (a handler's gr.Request), if any."""
    query = getattr(request, "query_params", None)
    return read_link(dict(query)) if query else None


def make_query(tab: str, values: Mapping[str, Any]) -> str:
    """The query string for a tab's current values (only the parameters that tab has)."""
    if tab not in TABS:
        raise PlaygroundError(f"Unknown tab {tab!r}: use one of {', '.join(TABS)}.")
    pairs = [("tab", tab)]
    for param in PARAMS[tab]:
        value = values.get(param.widget)
        if value is None or value == "" or value == []:
            continue
        pairs.append((param.key, _text(value)))
    return urlencode(pairs)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)
