"""Shareable links: the URL's query carries the tab, the prompt, the settings, the seed and the
view, and opening it rebuilds the same state (a seeded or greedy answer comes out the same).

Pure functions from component values to a query string and back, and the one page-load opener
every tab's `*_from_link` handler is made with; the wiring (page load, the "Copy link" button) is
in playground/ui/app.py. Each tab's parameters are short, named, and validated on the way in: a
hand-edited link with a bad value gets a toast that names it and what is allowed, none of its
values is used, and the page opens as it does without a link (never a stack trace).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import gradio as gr

from playground.beam import MAX_BEAMS, MAX_NEW_TOKENS
from playground.engine.embedded import EMBEDDED_MODELS
from playground.engine.quantize import SERVING_FORMATS
from playground.engine.sampling import DEFAULT_ORDER, validate_settings
from playground.errors import PlaygroundError
from playground.kv import KV_DTYPES, MODES, memory_gb
from playground.messages import Message
from playground.ui.chat_controls import SLIDERS
from playground.ui.common import warn
from playground.ui.control_ranges import BEAM_LENGTH_PENALTY, COMPARE_TEMPERATURE, STEP_SLIDERS
from playground.ui.i18n import LANGUAGES, language_of, localize, session_lang, t

TABS = ("chat", "step", "beam", "kv", "hood", "compare")
# The keys of the tabs' names (playground/ui/i18n)
TAB_TITLES = {
    "chat": "tab.chat",
    "step": "tab.step",
    "beam": "tab.beam",
    "kv": "tab.kv",
    "hood": "tab.hood",
    "compare": "tab.compare",
}
# Query parameters that are not a tab's setting and go with any link: Gradio's theme, presenter mode
# (static/theme.js), the page's language (static/i18n.js).
FOREIGN = ("__theme", "presenter", "lang")


@dataclass(frozen=True)
class Param:
    """One query parameter: its short name in the URL, the component it fills, how to read it
    (parse raises ValueError with what is allowed, e.g. "a whole number from 1 to 16")."""

    key: str  # in the URL
    widget: str  # the component's name in its tab's widgets
    parse: Callable[[str], Any]
    label: str = ""  # how a message names it (default: the widget's name in words)

    def name(self) -> str:
        return self.label or self.widget.replace("_", " ")


def number(low: float | None = None, high: float | None = None) -> Callable[[str], float]:
    """A finite number, within [low, high] where given."""
    return _bounded(float, Message("link.a_number", "a number"), low, high)


def whole(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """A whole number (as typed: 7, not 7.0), within [low, high] where given."""
    return _bounded(int, Message("link.a_whole_number", "a whole number"), low, high)


def _bounded(read: Callable[[str], Any], what: Message, low: float | None, high: float | None) -> Callable:
    """A parser whose ValueError says what is allowed (a Message)."""
    allowed = _range(what, low, high)

    def parse(text: str) -> Any:
        try:
            value = read(text)
        except ValueError:
            raise ValueError(allowed) from None
        if not math.isfinite(value) or not _within(value, low, high):
            raise ValueError(allowed)
        return value

    return parse


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(Message("link.one_of", "one of {choices}", choices=", ".join(choices)))
        return text

    return parse


def _range(what: Message, low: float | None, high: float | None) -> Message:
    if low is not None and high is not None:
        return Message("link.from_to", "{what} from {low:g} to {high:g}", what=what, low=low, high=high)
    if low is not None:
        return Message("link.at_least", "{what} of at least {low:g}", what=what, low=low)
    return what


def _within(value: float, low: float | None, high: float | None) -> bool:
    return (low is None or value >= low) and (high is None or value <= high)


def _flag(text: str) -> bool:
    return one_of("0", "1")(text) == "1"


def _order(text: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    if not set(names) <= set(DEFAULT_ORDER):
        raise ValueError(
            Message(
                "link.stages", "stage names from {names}, separated by commas", names=", ".join(DEFAULT_ORDER)
            )
        )
    return names


def _ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part]
    except ValueError:
        ids = [-1]
    if any(i < 0 for i in ids):
        raise ValueError(
            Message("link.ids", "token ids: whole numbers of at least 0 separated by commas, e.g. 7042,28")
        )
    return ids


class Refused(ValueError):
    """A value refused with a whole sentence of why (not only what is allowed): a str or Message."""


def sampling(name: str, read: Callable[[str], Any]) -> Callable[[str], Any]:
    """A sampling setting, checked by the engine's own rules (its message names the allowed range)."""

    def parse(text: str) -> Any:
        value = read(text)
        try:
            validate_settings({name: value})
        except PlaygroundError as exc:
            raise Refused(exc.message) from None
        return value

    return parse


def _memory(text: str) -> float:
    try:
        return memory_gb(text)
    except PlaygroundError as exc:
        raise Refused(exc.message) from None


SAMPLING = [
    Param("t", "temperature", sampling("temperature", number())),
    Param("k", "top_k", sampling("top_k", whole()), "top-k"),
    Param("p", "top_p", sampling("top_p", number()), "top-p"),
    Param("minp", "min_p", sampling("min_p", number()), "min-p"),
    Param("rep", "repetition_penalty", sampling("repetition_penalty", number())),
]
SEED = Param("seed", "seed", lambda text: str(whole(0)(text)))
MAX_NEW_TOKENS_LIMIT = 1024  # Settings.max_new_tokens_limit's default (link_rules takes the app's)


def chat_params(max_new_tokens_limit: int = MAX_NEW_TOKENS_LIMIT) -> list[Param]:
    """The Chat tab's parameters: each setting within its control's range (a value out of it is
    refused when the page opens, not brought into range later), max new tokens within the app's limit."""
    ranges = {name: (low, high, step) for name, (_, low, high, step, _) in SLIDERS.items()}
    limit = Param("max", "max_new_tokens", whole(1, max_new_tokens_limit), "max new tokens")
    return [
        Param("q", "message", str),
        Param("sys", "system_prompt", str),
        *on_controls(SAMPLING, ranges),
        limit,
        SEED,
    ]


def on_controls(params: list[Param], ranges: Mapping[str, tuple[float, float, float]]) -> list[Param]:
    """params, each also within its control's range (low, high, step) where `ranges` names it: the
    engine takes wider values than the controls show, but a link fills the controls."""
    return [
        Param(p.key, p.widget, _in_range(p.parse, *ranges[p.widget]), p.label) if p.widget in ranges else p
        for p in params
    ]


def _in_range(parse: Callable[[str], Any], low: float, high: float, step: float) -> Callable[[str], Any]:
    """parse, then within [low, high] (a whole number where the control steps by 1)."""
    bounded = whole(int(low), int(high)) if step == 1 else number(low, high)

    def both(text: str) -> Any:
        value = parse(text)
        bounded(text)
        return value

    return both


def _model_name(text: str) -> str:
    """A side's model: a name (an embedded model, a Hub id, a path); an empty one would leave the side
    without a model."""
    if not text.strip():
        raise ValueError(
            Message("link.a_model", "a model's name, e.g. {example}", example=next(iter(EMBEDDED_MODELS)))
        )
    return text.strip()


STEP_RANGES = {name: (low, high, step) for name, low, high, _, step in STEP_SLIDERS}


def compare_params(max_new_tokens_limit: int = MAX_NEW_TOKENS_LIMIT) -> list[Param]:
    """The Compare tab's parameters: both sides (a model, its weights, a temperature and a seed as
    their boxes take them), then each view's inputs."""
    sides = [
        param
        for side in "ab"
        for param in (
            Param(side, f"model_{side}", _model_name, f"model {side.upper()}"),
            Param(f"q{side}", f"quantize_{side}", one_of("none", *SERVING_FORMATS), f"quantize {side}"),
            Param(
                f"t{side}",
                f"temperature_{side}",
                sampling("temperature", number(*COMPARE_TEMPERATURE)),
                f"temperature {side}",
            ),
            Param(f"s{side}", f"seed_{side}", lambda text: str(whole()(text)), f"seed {side}"),
        )
    ]
    return [
        Param("view", "compare_view", one_of("chat", "score", "step", "tokens"), "view"),
        *sides,
        Param("q", "compare_message", str, "question"),
        Param("sys", "compare_system", str, "system prompt"),
        Param("max", "compare_max_new_tokens", whole(1, max_new_tokens_limit), "max new tokens"),
        Param("ctx", "score_context", str, "context"),
        Param("xa", "score_a", str, "text A"),
        Param("xb", "score_b", str, "text B"),
        Param("schat", "score_chat", _flag, "chat (scoring)"),
        Param("chat", "step_chat", _flag, "chat (step)"),
        Param("prefix", "step_prefix", str, "prefix"),
        Param("text", "tokens_text", str, "text"),
    ]


PARAMS: dict[str, list[Param]] = {
    "chat": chat_params(),
    "step": [
        Param("prompt", "prompt", str),
        Param("chat", "chat", _flag),
        *on_controls(
            [*SAMPLING, Param("typ", "typical_p", sampling("typical_p", number()), "typical-p")], STEP_RANGES
        ),
        Param("order", "order", _order),
        SEED,
        Param("cands", "candidates", whole(5, 40), "candidates in the chart"),
        Param("stage", "stage", one_of("raw", *DEFAULT_ORDER)),
        Param("path", "path", _ids),  # the generated token ids after the prompt
    ],
    "beam": [
        Param("prompt", "prompt", str),
        Param("chat", "chat", _flag),
        Param("beams", "beams", whole(1, MAX_BEAMS)),
        Param("steps", "steps", whole(1, MAX_NEW_TOKENS)),
        Param("lp", "length_penalty", number(*BEAM_LENGTH_PENALTY)),
        Param("es", "early_stopping", one_of("off", "on", "never")),
        Param("node", "node", whole(0)),
    ],
    "kv": [
        Param("preset", "preset", str),  # checked against the Model list when opened
        Param("seq", "seq_len", whole(1)),
        Param("batch", "batch", whole(1)),
        Param("kvdtype", "kv_dtype", one_of(*KV_DTYPES), "KV dtype"),
        Param("mode", "mode", one_of(*MODES)),
        Param("gpu", "gpu_gb", _memory),
        Param("wdtype", "weights_dtype", one_of(*KV_DTYPES)),
    ],
    "hood": [Param("view", "view", str)],  # and the lesson's inputs (LinkRules.lessons)
    "compare": compare_params(),
}


@dataclass(frozen=True)
class LinkRules:
    """The parameters a link to each tab takes in this app: PARAMS with the Chat's max new tokens
    within the app's limit, and for Under the hood each lesson's inputs (view key -> parameters)."""

    params: Mapping[str, list[Param]]
    lessons: Mapping[str, list[Param]] = field(default_factory=dict)

    def of(self, tab: str, view: str | None = None) -> list[Param]:
        """A tab's parameters; for Under the hood, those of the lesson `view` after `view` itself."""
        return [*self.params[tab], *(self.lessons.get(view or "", []) if tab == "hood" else [])]


def link_rules(
    max_new_tokens_limit: int = MAX_NEW_TOKENS_LIMIT, lessons: Mapping[str, list[Param]] | None = None
) -> LinkRules:
    own = {"chat": chat_params(max_new_tokens_limit), "compare": compare_params(max_new_tokens_limit)}
    return LinkRules({**PARAMS, **own}, dict(lessons or {}))


RULES = link_rules()  # an app with its own limit and lessons reads links with its own (ui/share.py)


def widget_param(key: str, widget: str, component: Any) -> Param | None:
    """The link parameter `key` of an input component (a lesson's), checked as the component
    would take it: a slider's range and step, a choice among its choices, a box's text. None for
    a choice whose choices come later (from a run): a link could not be checked when it opens."""
    if isinstance(component, gr.Checkbox):
        return Param(key, widget, _flag, key)
    if isinstance(component, gr.Slider):
        low, high, step = component.minimum, component.maximum, component.step
        whole_steps = float(step).is_integer() and float(low).is_integer()
        return Param(key, widget, whole(int(low), int(high)) if whole_steps else number(low, high), key)
    choices = [value for _, value in getattr(component, "choices", None) or []]
    if isinstance(component, (gr.Dropdown, gr.CheckboxGroup, gr.Radio)) and not choices:
        return None
    if isinstance(component, gr.CheckboxGroup) or getattr(component, "multiselect", False):
        return Param(key, widget, _choices(choices), key)
    if choices:
        return Param(key, widget, one_of(*map(str, choices)), key)
    return Param(key, widget, str, key)


def _choices(allowed: list[Any]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        chosen = [name for name in text.split(",") if name]
        if not set(chosen) <= set(map(str, allowed)):
            names = ", ".join(map(str, allowed))
            raise ValueError(Message("link.names", "names from {names}, separated by commas", names=names))
        return chosen

    return parse


@dataclass(frozen=True)
class Link:
    """What a shared link asks for: the tab, and values by component name for that tab."""

    tab: str
    values: dict[str, Any]

    @property
    def runs(self) -> bool:
        """The link reproduces a result (an answer, a path, a search), not only settings."""
        wanted = {"chat": "message", "step": "prompt", "beam": "prompt", "compare": "compare_view"}
        return wanted.get(self.tab, "") in self.values

    def over(self, shown: Mapping[str, Any]) -> dict[str, Any]:
        """The controls' values `shown`, with the ones this link sets put over them."""
        return {**shown, **{k: v for k, v in self.values.items() if k in shown}}


@dataclass(frozen=True)
class Reading:
    """A page's query read: the valid link (None without one, or when it has a bad value), the tab
    to show (the one it names, if that is a tab), and what was wrong ('' when nothing)."""

    link: Link | None
    tab: str | None
    problem: str = ""


def read_query(query: Mapping[str, str], lang: str = "en", rules: LinkRules | None = None) -> Reading:
    """Every parameter checked (rules: this app's, RULES by default); a bad one is named with what is
    allowed (in lang), and then no value of the link is used (a link opens exactly what it says, or
    the tab's defaults)."""
    rules = rules or RULES
    tab = query.get("tab")
    if not tab:
        return Reading(None, None)
    if tab not in TABS:
        return Reading(None, None, t("link.bad_tab", lang, tab=tab, tabs=", ".join(TABS)))
    view = query.get("view") if tab == "hood" else None
    if rules.lessons and view is not None and view not in rules.lessons:
        return Reading(None, tab, t("link.bad_lesson", lang, view=view, lessons=", ".join(rules.lessons)))
    params = {param.key: param for param in rules.of(tab, view)}
    values, problems = {}, []
    for key, text in query.items():
        if key == "tab" or key in FOREIGN:
            continue
        if key not in params:
            where = "link.not_a_lesson_setting" if view else "link.not_a_setting"
            problems.append(t(where, lang, key=key, text=text, keys=", ".join(params)))
            continue
        try:
            values[params[key].widget] = params[key].parse(text)
        except ValueError as exc:
            problems.append(t("link.refused", lang, key=key, text=text, why=_why(exc, params[key], lang)))
    if problems:
        return Reading(None, tab, t("link.problems", lang, problems=t("link.separator", lang).join(problems)))
    return Reading(Link(tab, values), tab)


def _why(exc: ValueError, param: Param, lang: str) -> str:
    """Why a parser refused a value, in lang, without its closing full stop (the sentence goes on)."""
    said = localize(exc.args[0] if exc.args else "", lang)
    if not isinstance(exc, Refused):
        said = t("link.must_be", lang, name=param.name(), allowed=said)
    return said.rstrip(".。")


def read_link(query: Mapping[str, str], rules: LinkRules | None = None) -> Link | None:
    """The link in a page's query parameters (None when it names no tab); a bad value is named."""
    reading = read_query(query, rules=rules)
    if reading.problem:
        raise PlaygroundError(reading.problem)
    return reading.link


def page_query(request: Any, rules: LinkRules | None = None) -> Reading:
    """The query the page was opened with (a handler's gr.Request), read in the page's language."""
    query = getattr(request, "query_params", None)
    return read_query(dict(query), session_lang(request), rules) if query else Reading(None, None)


def link_to(tab: str, request: Any, rules: LinkRules | None = None) -> Link | None:
    """The valid link to `tab` the page was opened with, if any (its problems are told once, on
    page load, by `warn_bad_link`)."""
    link = page_query(request, rules).link
    return link if link is not None and link.tab == tab else None


def warn_bad_link(request: Any, rules: LinkRules | None = None) -> str | None:
    """Page load: a toast for a link that can't be opened (or a ?lang= that names no language here);
    returns the tab to show (None: as usual)."""
    reading, lang = page_query(request, rules), session_lang(request)
    if reading.problem:
        if reading.tab:
            warn(
                t("link.tab_opened", lang, problem=reading.problem, tab=t(TAB_TITLES[reading.tab], lang)),
                lang,
            )
        else:
            warn(t("link.page_opened", lang, problem=reading.problem), lang)
    asked = dict(getattr(request, "query_params", None) or {}).get("lang")
    if asked is not None and language_of(asked) is None:
        warn(t("link.bad_lang", lang, lang=asked, languages=", ".join(_languages())), lang)
    return reading.tab


def _languages() -> list[str]:
    return [f"{code} ({language.name})" for code, language in LANGUAGES.items()]


def warn_unopened(tab: str, exc: Exception, lang: str = "en") -> None:
    """A link whose values read well but could not be used (a token id past the vocabulary...)."""
    why = localize(exc.message if isinstance(exc, PlaygroundError) else str(exc), lang)
    warn(t("link.unopened", lang, why=why, tab=t(TAB_TITLES[tab], lang)), lang)


Opener = Callable[..., dict[str, Any]]  # (link, values by name, request=..., progress=...) -> views


def link_opener(tab: str, run: Callable[..., dict], open_link: Opener, default: bool = False) -> Any:
    """The page-load handler of a tab, taking what its `run` handler takes (the controls as shown,
    then gr.Request, and gr.Progress if run has it): with a valid link to `tab`, the link's values
    go on the controls, and open_link(link, values, request=..., progress=...) gives the views; a
    value it refuses is told as a toast and the tab opens as usual. Without a link: nothing, or
    with `default`, `run` on the controls as shown (the Step tab starts its default prompt)."""
    signature = inspect.signature(run)
    takes_request = "request" in signature.parameters
    if not takes_request:  # the opener needs the page's query: Gradio injects it by this annotation
        signature = _with_request(signature)
    injected = [name for name in ("request", "progress") if name in signature.parameters]
    settable = {param.widget for param in PARAMS[tab]}

    def opened(*args: Any, **kwargs: Any) -> dict[str, Any]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        extra = {name: bound.arguments[name] for name in injected}
        shown = {name: value for name, value in bound.arguments.items() if name not in extra}
        link = link_to(tab, extra["request"])
        if link is not None:
            values = link.over(shown)
            try:
                views = open_link(link, values, **extra)
            except PlaygroundError as exc:
                warn_unopened(tab, exc, session_lang(extra["request"]))
            else:
                return {**{k: v for k, v in values.items() if k in settable}, **views}
        if not takes_request:
            extra.pop("request")
        return run(**shown, **extra) if default else {}

    opened.__signature__ = signature  # type: ignore[attr-defined]
    opened.__annotations__ = {**getattr(run, "__annotations__", {}), "request": gr.Request}
    opened.__name__ = f"{tab}_from_link"
    opened.__doc__ = f"Page load: a shared link to the {tab} tab opened on its controls."
    return opened


def _with_request(signature: inspect.Signature) -> inspect.Signature:
    """signature and a last `request=None` parameter (keyword-only after a *args, before a **kwargs)."""
    params = list(signature.parameters.values())
    tail = [p for p in params if p.kind == p.VAR_KEYWORD]
    head = [p for p in params if p.kind != p.VAR_KEYWORD]
    varargs = any(p.kind in (p.VAR_POSITIONAL, p.KEYWORD_ONLY) for p in head)
    kind = inspect.Parameter.KEYWORD_ONLY if varargs else inspect.Parameter.POSITIONAL_OR_KEYWORD
    return signature.replace(parameters=[*head, inspect.Parameter("request", kind, default=None), *tail])


def make_query(
    tab: str, values: Mapping[str, Any], lang: str | None = None, rules: LinkRules | None = None
) -> str:
    """The query string for a tab's current values (only the parameters that tab has; Under the
    hood: those of the lesson values["view"]), and the page's language when given (a link opens in
    the language it was made in)."""
    if tab not in TABS:
        raise PlaygroundError(
            "Unknown tab {tab!r}: use one of {tabs}.", key="link.unknown_tab", tab=tab, tabs=", ".join(TABS)
        )
    pairs = [("tab", tab)]
    for param in (rules or RULES).of(tab, values.get("view")):
        value = values.get(param.widget)
        if value is None or value == "" or value == []:
            continue
        pairs.append((param.key, _text(value)))
    if lang:
        pairs.append(("lang", lang))
    return urlencode(pairs)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)
