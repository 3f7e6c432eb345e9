"""The Under the hood tab's handlers as plain functions: what Gradio calls, without a browser."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from playground.engine.base import Engine
from playground.ui.hood import VIEWS, HoodEnv, HoodTab
from playground.ui.hood.tab import run_handler
from playground.ui.state import TabStates
from playground.workspace import Workspaces


def request(session: str) -> SimpleNamespace:
    return SimpleNamespace(session_hash=session)


class Hood:
    """One app's Under the hood tab, driven as Gradio drives it (handlers by view key)."""

    def __init__(self, engine: Engine, draft: Engine | None = None) -> None:
        self.workspaces = Workspaces(engine)
        self.tab = HoodTab(HoodEnv.of(engine, draft), self.workspaces, TabStates(), VIEWS)

    def view(self, key: str) -> Any:
        return self.tab.views[key]

    def run(self, key: str, *args: Any, session: str = "tab", ticket: int | None = None) -> Any:
        """The view's Run handler as Gradio calls it (positional widget values, the request, then
        the Run button's ticket)."""
        return run_handler(self.tab, self.view(key))(*args, request(session), ticket)

    def ticket(self, key: str, session: str = "tab") -> int:
        """What the Run button asks for before its run joins the queue."""
        return self.tab.ticket(self.view(key), request(session))[f"{key}_ticket"]

    def last(self, key: str, *args: Any, session: str = "tab") -> dict[str, Any]:
        """Run to the end; the final views."""
        return list(self.run(key, *args, session=session))[-1]

    def trace(self, key: str, session: str = "tab") -> str:
        return self.tab.trace(self.view(key), request(session))

    def stop(self, key: str, session: str = "tab") -> dict[str, Any]:
        return self.tab.stop(self.view(key), request(session))
