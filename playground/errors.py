"""User-facing errors: raised by the engine, shown as a plain message by the UI and API."""

from __future__ import annotations

from typing import Any

from playground.messages import Message


class PlaygroundError(ValueError):
    """A problem the user can fix (bad input, unknown model, too long a prompt...).

    The message is shown as is, so it must say what was wrong and what is allowed. Given a `key`,
    the message is an English template and `params` its values: a translatable Message (see
    playground/messages.py) that the UI says in the session's language.
    """

    def __init__(self, message: str = "", /, *, key: str | None = None, **params: Any) -> None:
        super().__init__(Message(key, message, **params) if key else message)

    @property
    def message(self) -> str:
        """The message: a Message when it was raised with a key, else a plain str."""
        return self.args[0] if self.args else ""


class Cancelled(PlaygroundError):
    """The request was stopped (Stop pressed, tab closed, or `Control.cancel()` called)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or Message("stop.cancelled", "Stopped: the request was cancelled."))


class EngineUnavailable(PlaygroundError):
    """A remote engine is down, timed out, or answered something we cannot use."""
