"""User-facing errors: raised by the engine, shown as a plain message by the UI and API."""


class PlaygroundError(ValueError):
    """A problem the user can fix (bad input, unknown model, too long a prompt...).

    The message is shown as is, so it must say what was wrong and what is allowed.
    """


class Cancelled(PlaygroundError):
    """The request was stopped (Stop pressed, tab closed, or `Control.cancel()` called)."""

    def __init__(self, message: str = "Stopped: the request was cancelled.") -> None:
        super().__init__(message)


class EngineUnavailable(PlaygroundError):
    """A remote engine is down, timed out, or answered something we cannot use."""
