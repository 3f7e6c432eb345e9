"""The playground in several languages: one table of strings per language, keyed.

Each module here named by a language code (en.py, zh.py) is a language: NAME (in itself, for the
header's switch), LOCALE (Gradio's, whose own strings then follow) and STRINGS, {key: text}. English
is complete; a key another language lacks shows in English. Adding a language is adding one file.

Two kinds of text (README "Languages: add a string, add a language"):
- Static text of components (labels, info, button text, Markdown, tab names, choices): `i18n(key)`.
  Gradio translates it in the browser, live when the language changes (launch(i18n=gradio_i18n())).
- Text built on the server (status lines, toasts, errors, plots, Markdown with numbers): `t(key, lang,
  **params)` in the session's language `session_lang(request)`; the engine's own text (errors, the KV
  formula) is a playground.messages.Message, said in a language by `localize(message, lang)`.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import pkgutil
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from playground.messages import LIST_SEPARATOR, Message, as_text

if TYPE_CHECKING:  # Gradio is imported where it is used: the tables and t() serve plots/ too
    import gradio as gr

log = logging.getLogger(__name__)

DEFAULT = "en"  # the complete table, and the language when nothing asks for another


@dataclass(frozen=True)
class Language:
    """One language: its code (?lang=zh), its name in itself, Gradio's locale and its strings."""

    code: str
    name: str
    locale: str
    strings: Mapping[str, str]


def _load_languages() -> dict[str, Language]:
    """Every language module of this package, English first."""
    codes = [m.name for m in pkgutil.iter_modules(__path__) if re.fullmatch(r"[a-z]{2,3}", m.name)]
    languages = {}
    for code in sorted(codes, key=lambda c: (c != DEFAULT, c)):
        module = importlib.import_module(f"{__name__}.{code}")
        languages[code] = Language(code, module.NAME, module.LOCALE, module.STRINGS)
    return languages


LANGUAGES = _load_languages()
ENGLISH = LANGUAGES[DEFAULT].strings


def t(key: str, lang: str, /, **params: Any) -> str:
    """The text of `key` in `lang` with `params` put in ({name} fields, str.format); English where
    `lang` lacks it, the key itself (and a warning in the log) where no language has it."""
    template = _table(lang).get(key)
    if template is None:
        template = ENGLISH.get(key)
        if template is None:
            log.warning("No text for the key %r in any language", key)
            return key
    try:
        return template.format(**params)
    except (KeyError, IndexError, ValueError):
        english = ENGLISH.get(key)
        if english is None or english == template:
            raise  # the English text itself does not fit: a bug to fix where t() is called
        log.warning("The translation of %r does not fit its values", key)
        return english.format(**params)


def localize(text: Any, lang: str) -> str:
    """Engine text in `lang`: a Message by its key (its own English where `lang` lacks the key, and
    its values localized too); any other text as it is."""
    if not isinstance(text, Message):
        return str(text)
    params = {name: _localized(value, lang) for name, value in text.params.items()}
    english = {name: as_text(value) for name, value in text.params.items()}
    template = _table(lang).get(text.key, text.template)
    try:
        return template.format(**params)
    except (KeyError, IndexError, ValueError):  # a translation that does not fit its values
        log.warning("The translation of %r does not fit its values", text.key)
        return text.template.format(**english)


def localize_recorded(figure: Any, lang: str) -> Any:
    """A recorded figure (plotly JSON, saved in English) with its static texts in `lang`: titles,
    annotations and legend names that are a figure's English text with no values. Texts with values
    (counts, layers), tick labels and data (the model's tokens) stay as recorded."""
    if isinstance(figure, list):
        return [localize_recorded(item, lang) for item in figure]
    if not isinstance(figure, dict):
        return figure
    shown = {}
    for name, item in figure.items():
        if name in FIGURE_TEXTS and isinstance(item, str):
            shown[name] = recorded_text(item, lang)
        else:
            shown[name] = localize_recorded(item, lang)
    return shown


def recorded_text(text: str, lang: str) -> str:
    """A static text recorded in English (a plot's label, title or legend name) in `lang`; any other
    text as recorded."""
    key = _static_english().get(text)
    return text if key is None else t(key, lang)


FIGURE_TEXTS = {"text", "title", "name", "hovertemplate"}  # plotly's fields of static text


@functools.cache
def _static_english() -> dict[str, str]:
    """English text -> its key, for the figures' keys (`plot.*` and `*.plot.*`) whose text takes no
    values: only a figure's own static text is translated, never a token that happens to read the
    same as a button."""
    keys: dict[str, str] = {}
    for key, template in ENGLISH.items():
        if not is_plot_key(key):
            continue
        try:
            keys.setdefault(template.format(), key)
        except (KeyError, IndexError, ValueError):
            continue
    return keys


def is_plot_key(key: str) -> bool:
    return key.startswith("plot.") or ".plot." in key


def _localized(value: Any, lang: str) -> Any:
    """A Message's value in lang: Messages translated, lists joined (playground/messages.py)."""
    if isinstance(value, (list, tuple)):
        return LIST_SEPARATOR.join(_localized(item, lang) for item in value)
    return localize(value, lang) if isinstance(value, Message) else value


def _table(lang: str) -> Mapping[str, str]:
    language = LANGUAGES.get(lang)
    return language.strings if language is not None else ENGLISH


def i18n(key: str) -> Any:
    """Static text of a component, translated in the browser (KeyError now for a key English lacks)."""
    from gradio.i18n import I18nData

    if key not in ENGLISH:
        raise KeyError(f"{key!r} is not in playground/ui/i18n/en.py")
    return I18nData(key)


def named_tabs(blocks: gr.Blocks) -> dict[str, gr.Tab]:
    """Every tab of `blocks` named by a key (`i18n(key)`), as tab_<its id>: their names are sent in the
    session's language (`tab_names`). Gradio names a tab not drawn yet (any other than the one shown
    in each row) once, in the browser's language when the page starts, and never again: ?lang= and
    the header's switch change its language later."""
    import gradio as gr
    from gradio.i18n import I18nData

    tabs = [block for block in blocks.blocks.values() if isinstance(block, gr.Tab)]
    return {f"tab_{tab.id or tab._id}": tab for tab in tabs if isinstance(tab.label, I18nData)}


def tab_names(tabs: Mapping[str, gr.Tab], lang: str) -> dict[str, gr.Tab]:
    """The names of `tabs` (from `named_tabs`) in `lang`: updates for those tabs."""
    import gradio as gr

    return {name: gr.Tab(label=t(tab.label.key, lang)) for name, tab in tabs.items()}


def gradio_i18n() -> gr.I18n:
    """Every language's strings for launch(i18n=...), under Gradio's locale names."""
    import gradio as gr

    return gr.I18n(**{language.locale: dict(language.strings) for language in LANGUAGES.values()})


# --- the session's language -----------------------------------------------------------------------


def language_of(tag: Any) -> str | None:
    """The language a tag names ("zh", "zh-CN", "en_US"...), None when it names none of ours."""
    code = str(tag or "").strip().replace("_", "-").split("-")[0].lower()
    return code if code in LANGUAGES else None


def accepted_language(header: str | None) -> str | None:
    """The first of ours in an Accept-Language header ("zh-CN,zh;q=0.9,en;q=0.8"), by preference."""
    ranked = []
    for position, part in enumerate((header or "").split(",")):
        tag, _, weight = part.strip().partition(";q=")
        try:
            quality = float(weight) if weight else 1.0
        except ValueError:
            quality = 0.0
        ranked.append((-quality, position, tag))
    return next((code for *_, tag in sorted(ranked) if (code := language_of(tag))), None)


def session_lang(request: Any) -> str:
    """The language of the page a request came from: its ?lang= (the header's switch keeps it in the
    address), else the browser's languages (Accept-Language), else English. API calls: their
    Accept-Language header, or English."""
    query = dict(getattr(request, "query_params", None) or {})
    headers = {k.lower(): v for k, v in dict(getattr(request, "headers", None) or {}).items()}
    return language_of(query.get("lang")) or accepted_language(headers.get("accept-language")) or DEFAULT


def browser_script() -> str:
    """A launch(js=...) function that hands the browser the languages and the strings of static/*.js
    (keys "js.*"), for static/i18n.js."""
    data = {
        "fallback": DEFAULT,
        "languages": {code: {"name": lang.name, "locale": lang.locale} for code, lang in LANGUAGES.items()},
        "strings": {
            code: {k: v for k, v in lang.strings.items() if k.startswith("js.")}
            for code, lang in LANGUAGES.items()
        },
    }
    return f"() => {{ window.playgroundI18n = {json.dumps(data, ensure_ascii=False)}; }}"
