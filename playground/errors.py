"""User-facing errors: raised by the engine, shown as a plain message by the UI and API."""


class PlaygroundError(ValueError):
    """A problem the user can fix (bad input, unknown model, too long a prompt...).

    The message is shown as is, so it must say what was wrong and what is allowed.
    """
