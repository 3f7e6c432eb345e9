"""Launch a Gradio demo on a free local port for a test, robust to a loaded machine."""

from __future__ import annotations

from typing import Any

ATTEMPTS = 3


def launch_local(demo: Any, **options: Any) -> str:
    """demo.launch() on 127.0.0.1 without blocking; its base URL (no trailing slash).

    Gradio checks at launch that localhost answers a HEAD request within 3 s, and refuses to start
    otherwise ("When localhost is not accessible..."). On a shared CI machine under load the first
    answer can take longer: close and launch again, a few times, before failing."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _, url, _ = demo.launch(
                server_name="127.0.0.1", server_port=None, prevent_thread_lock=True, quiet=True, **options
            )
            return url.rstrip("/")
        except ValueError as exc:
            if "localhost is not accessible" not in str(exc) or attempt == ATTEMPTS:
                raise
            demo.close()
    raise AssertionError("unreachable")
