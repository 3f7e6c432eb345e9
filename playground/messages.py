"""Text the engine hands to people, kept translatable with no UI in the engine.

A `Message` is the English text (it *is* a str, so logs, tests and notebooks read it as before) that
also carries a key, its English template and the values put into it. The UI looks the key up in the
session's language (playground/ui/i18n: `localize`) and formats that template with the same values;
a language without the key shows the English. A value that is itself a Message is translated too,
and a list of values reads as its items joined by "; " (LIST_SEPARATOR):

    Message("kv.error.bad_json", "The config is not valid JSON: {why}.", why=exc.msg)
    PlaygroundError("Unknown dtype {name!r}.", key="kv.error.unknown_dtype", name=dtype)  # the same, raised

Keys and templates are literals at the call, so tests/test_i18n.py finds every one in the code and
checks that every language has it, with the same {placeholders}.
"""

from __future__ import annotations

from typing import Any

LIST_SEPARATOR = "; "


class Message(str):
    """English text with its key, template and values (see the module docstring)."""

    key: str
    template: str
    params: dict[str, Any]

    def __new__(cls, key: str, template: str, /, **params: Any) -> Message:
        text = super().__new__(cls, template.format(**{k: as_text(v) for k, v in params.items()}))
        text.key, text.template, text.params = key, template, params
        return text

    @classmethod
    def of_key(cls, key: str, english: str) -> Message:
        """Text whose key the UI's tables already hold (a component's label, given as i18n(key)),
        English here: said in a language by that key, like any Message (it takes no values)."""
        return cls(key, english.replace("{", "{{").replace("}", "}}"))

    def __reduce__(self) -> tuple[Any, ...]:
        # copy, deepcopy (gr.State) and pickle rebuild it whole, not as a plain str
        return (_rebuild, (self.key, self.template, self.params))


def message_data(text: str) -> dict[str, Any] | None:
    """A Message as plain JSON-ready data (None for plain text), so a saved file can say it again in
    any language: message_from_data(message_data(m)) == m, key, template and values included."""
    if not isinstance(text, Message) or any(isinstance(v, Message) for v in text.params.values()):
        return None
    return {"key": text.key, "template": text.template, "params": text.params}


def message_from_data(data: dict[str, Any] | None, text: str) -> str:
    """The Message saved by message_data, or the saved plain text where there is none (older files)."""
    return text if data is None else Message(data["key"], data["template"], **data["params"])


def as_text(value: Any) -> Any:
    """A template's value as it is put in: a list (or tuple) as its items joined, anything else as is."""
    return LIST_SEPARATOR.join(map(str, value)) if isinstance(value, (list, tuple)) else value


def _rebuild(key: str, template: str, params: dict[str, Any]) -> Message:
    return Message(key, template, **params)
