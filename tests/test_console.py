"""What a newcomer sees in the terminal: one line of ours once the app serves (no Gradio hint
about launch(), no per-request INFO lines), and a browser opened only for a person at a desktop."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import app as playground_app
from playground.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_console_shows_our_one_line_and_no_request_logs():
    """The real `python app.py` (on the bundled traces: no model to load), its stdout a pipe."""
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "app.py", "--replay", "docs/traces", "--port", str(port)]
    server = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        lines = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any(line.startswith("Serving on") for line in lines):
            line = server.stdout.readline()
            if not line and server.poll() is not None:
                break
            lines.append(line)
        for path in ("/", "/gradio_api/info", "/"):  # requests like a browser's
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30).read()
        time.sleep(1)
    finally:
        server.terminate()
        rest, _ = server.communicate(timeout=30)
    console = "".join(lines) + rest
    assert f"Serving on http://127.0.0.1:{port} · --share for a public link · Ctrl+C stops it" in console, (
        console
    )
    assert "share=True" not in console and "launch()" not in console, console
    assert "HTTP Request" not in console and "INFO" not in console, console
    assert "opened in your browser" not in console  # its stdout is no terminal: no browser


@pytest.mark.parametrize(
    ("browser", "tty", "display", "space", "opens"),
    [
        (True, True, ":0", None, True),
        (False, True, ":0", None, False),  # --no-browser
        (True, False, ":0", None, False),  # a test, CI, a service: no terminal
        (True, True, None, None, False),  # SSH or a container on Linux: no screen
        (True, True, ":0", "user/space", False),  # on Spaces
    ],
)
def test_a_browser_opens_only_for_a_person_at_a_desktop(monkeypatch, browser, tty, display, space, opens):
    monkeypatch.setattr(sys, "platform", "linux")
    for name, value in (("DISPLAY", display), ("WAYLAND_DISPLAY", None), ("SPACE_ID", space)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: tty, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty, raising=False)
    assert playground_app.opens_browser(load_settings(browser=browser)) is opens


def test_no_browser_is_an_option_and_a_variable(monkeypatch):
    assert playground_app.parse_args([]).browser is True
    assert playground_app.parse_args(["--no-browser"]).browser is False
    monkeypatch.setenv("PLAYGROUND_BROWSER", "0")
    assert playground_app.parse_args([]).browser is False


def test_the_ready_line_names_the_url_the_share_link_and_the_browser():
    line = playground_app.ready_line("http://127.0.0.1:7860/", None, True)
    assert line == (
        "Serving on http://127.0.0.1:7860 (opened in your browser) · --share for a public link"
        " · Ctrl+C stops it"
    )
    line = playground_app.ready_line("http://127.0.0.1:7860/", "https://abc.gradio.live", False)
    assert line == "Serving on http://127.0.0.1:7860 · public link https://abc.gradio.live · Ctrl+C stops it"


# (api name, the values sent with one bad value in a number box or a slider's, what the message says)
BAD_NUMBERS = [
    ("/step_run", [-3, ""], "N -3 is outside its range 1–512"),  # the "Run N steps" with N = -3
    ("/step_run", ["lots", ""], "N must be a number, got 'lots'"),
    ("/step_pick_rank", ["lots"], "Rank must be a number, got 'lots'"),
    ("/step_view", [100, "raw"], "Candidates in the chart 100 is outside its range 5–40"),
    ("/step_open_chat_token", ["lots"], "Open position must be a number, got 'lots'"),
    ("/chat_fork", [[], "lots", 5, False], "Fork position must be a number, got 'lots'"),
    (
        "/kv_calculate",
        ["Llama-3.1-8B", "{}", -5, 1, "float16", "ideal", 80, "bfloat16", None, 10],
        "Sequence length must be a positive whole number, got -5",
    ),
    ("/kv_measure", [0], "Prompt length (tokens) 0 is outside its range 1–2048"),
    ("/hood_attention", ["The cat sat.", 99, 1], "Layer 99 is outside its range 1–30"),
]


def test_a_bad_value_in_a_number_box_is_told_and_leaves_the_console_clean(launched_app, capfd):
    """Gradio's own range check printed a traceback (anyio, queueing) for a user's typing slip."""
    from gradio_client import Client

    client = Client(launched_app, verbose=False)
    capfd.readouterr()  # what the app printed before
    for api_name, values, message in BAD_NUMBERS:
        try:
            told = str(client.predict(*values, api_name=api_name)[0])  # the KV calculator: its summary
        except Exception as exc:  # the toast's text
            told = str(exc)
        assert message in told, (api_name, told)
    console = "".join(capfd.readouterr())
    assert "Traceback" not in console and "Error" not in console, console
