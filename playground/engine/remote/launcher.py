"""Start and stop a local llama-server (the one scripts/build_llama_server.sh builds) for tests,
benchmarks and notebooks:

    with LlamaServer.start() as server:                # the embedded GGUF on a free loopback port
        engine = connect(server.url, "llama.cpp")
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from playground.errors import EngineUnavailable
from playground.messages import Message
from playground.settings import load_settings

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the sdist whose vendored llama.cpp scripts/build_llama_server.sh builds
LLAMA_SERVER_BUILD = f"{LLAMA_CPP_PYTHON_VERSION}-noamx"  # its build's name there (built without Intel AMX)
READY_TIMEOUT = 120.0  # seconds for the server to load the model and answer /health


def built_binary_dir() -> Path:
    return Path(load_settings().cache_dir) / f"llama-server-{LLAMA_SERVER_BUILD}"


def llama_server_binary() -> Path | None:
    """PLAYGROUND_LLAMA_SERVER, else the binary scripts/build_llama_server.sh put in the cache dir."""
    given = os.environ.get("PLAYGROUND_LLAMA_SERVER")
    path = Path(given) if given else built_binary_dir() / "llama-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def why_no_binary() -> Message:
    """Why llama_server_binary() is None, with the build log's last lines when a build failed."""
    where = built_binary_dir()
    log = where.parent / f"{where.name}.log"
    not_built = Message(
        "remote.launcher.not_built",
        "llama-server is not built: run scripts/build_llama_server.sh (expected {where}/llama-server)",
        where=str(where),
    )
    if not log.is_file():
        return not_built
    tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
    return Message(
        "remote.launcher.build_failed",
        "{not_built}; the last build log ({log}) ends: {tail}",
        not_built=not_built,
        log=str(log),
        tail=tail[-600:],
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """A llama-server process on 127.0.0.1; `url` is its base URL. Stopping it is idempotent."""

    binary: Path
    model: Path
    port: int
    args: tuple[str, ...] = ()
    # One core is left to the app's own process (on 2 cores two server threads and a busy client
    # thrash: measured 3.9 tok/s against 30 with one thread on a loaded machine).
    threads: int = field(default_factory=lambda: max(1, min(4, (os.cpu_count() or 1) - 1)))
    process: subprocess.Popen | None = None
    log_path: Path = field(
        default_factory=lambda: Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
    )

    @classmethod
    def start(
        cls,
        model: Path | None = None,
        *,
        port: int | None = None,
        args: tuple[str, ...] = (),
        threads: int | None = None,
    ) -> LlamaServer:
        """The built binary serving model (default: the embedded GGUF), ready to answer."""
        binary = llama_server_binary()
        if binary is None:
            raise EngineUnavailable(why_no_binary())
        if model is None:
            from playground.engine.loading import embedded_gguf_path

            model = embedded_gguf_path()
        server = cls(binary, Path(model), port or free_port(), tuple(args))
        if threads:
            server.threads = int(threads)
        server.launch()
        return server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch(self) -> None:
        """Start the process (again, on the same port) and wait until /health says ok."""
        command = [str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["-c", "4096", "-np", "1", "-t", str(self.threads), *self.args]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise EngineUnavailable(
                    Message(
                        "remote.launcher.exited",
                        "llama-server exited at start (code {code}): {log}",
                        code=self.process.returncode,
                        log=self.log_tail(),
                    )
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise EngineUnavailable(
            Message(
                "remote.launcher.not_ready",
                "llama-server was not ready within {limit:g} s: {log}",
                limit=READY_TIMEOUT,
                log=self.log_tail(),
            )
        )

    def kill(self) -> None:
        """SIGKILL, as a crash would (for fault tests)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, lines: int = 8) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
