"""LLM generation playground: `python app.py` runs it; `app.demo` is the Gradio app (Spaces).

Options (each also settable as an environment variable):
  --model   PLAYGROUND_MODEL   gemma-3-270m (the second embedded model), a Hub id, local dir or .gguf path
                               (default: the embedded SmolLM2-135M-Instruct)
  --draft-model PLAYGROUND_DRAFT_MODEL  a model with the same tokenizer: the speculative-decoding draft
  --quantize PLAYGROUND_QUANTIZE  serve on quantized weights: int8 (torchao), hqq8/4/3/2 (slower)
  --device  PLAYGROUND_DEVICE  auto, cpu, cuda, cuda:N, mps (default auto)
  --host    PLAYGROUND_HOST    interface to listen on (default 127.0.0.1)
  --port    PLAYGROUND_PORT    port (default 7860)
  --share   PLAYGROUND_SHARE   create a public Gradio share link (default off)
  --no-browser  PLAYGROUND_BROWSER=0  don't open a browser (it opens only from a terminal on a desktop)
  --replay  PLAYGROUND_REPLAY  serve recorded traces (a .json file or a folder) with no model loaded
  --no-compile  PLAYGROUND_COMPILE=0  decode eagerly (no static KV cache / CUDA graphs on a GPU)
  --decode  PLAYGROUND_DECODE  auto (static + CUDA graphs on CUDA, eager elsewhere), static or eager
  --engine  PLAYGROUND_ENGINE  use a serving engine instead of loading the model here: llama.cpp, vllm, sglang
  --engine-url        PLAYGROUND_ENGINE_URL        that engine's URL, e.g. http://127.0.0.1:8080
  --engine-tokenizer  PLAYGROUND_ENGINE_TOKENIZER  the served model's tokenizer (dir, .gguf or Hub id;
                                                   default: found from the server, checked against it)
  --engine-top-n      PLAYGROUND_ENGINE_TOP_N      alternatives per position (default: the server's maximum)
  --api-key PLAYGROUND_API_KEY a bearer token the OpenAI-compatible API (/v1/...) requires (default: none)
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import Any

from playground.errors import PlaygroundError
from playground.settings import Settings, load_settings

# ZeroGPU on Spaces wants `spaces` imported before CUDA is touched; elsewhere it is absent.
with contextlib.suppress(ImportError):
    import spaces  # noqa: F401

_demo = None


def parse_args(argv: list[str] | None = None) -> Settings:
    defaults = load_settings()
    parser = argparse.ArgumentParser(description="LLM generation playground")
    parser.add_argument(
        "--model",
        default=defaults.model,
        help="gemma-3-270m (embedded), a Hub id, local dir or .gguf (default: embedded SmolLM2)",
    )
    parser.add_argument(
        "--draft-model",
        default=defaults.draft_model,
        help="a smaller model with the same tokenizer: the draft for speculative decoding (default: none)",
    )
    parser.add_argument("--device", default=defaults.device, help="auto, cpu, cuda, cuda:N or mps")
    parser.add_argument(
        "--quantize",
        default=defaults.quantize,
        metavar="FORMAT",
        help="serve on quantized weights: int8 (torchao), hqq8, hqq4, hqq3, hqq2",
    )
    parser.add_argument(
        "--dtype", default=defaults.dtype, help="float32, float16 or bfloat16 (default: auto)"
    )
    parser.add_argument("--host", default=defaults.host, help="interface to listen on")
    parser.add_argument("--port", type=int, default=defaults.port)
    parser.add_argument("--share", action="store_true", default=defaults.share, help="public share link")
    parser.add_argument(
        "--no-browser",
        dest="browser",
        action="store_false",
        default=defaults.browser,
        help="don't open a browser (by default it opens when started from a terminal on a desktop)",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        default=defaults.trust_remote_code,
        help="allow code shipped with a Hub model to run (off by default)",
    )
    parser.add_argument(
        "--replay",
        default=defaults.replay,
        metavar="FILE_OR_DIR",
        help="serve recorded traces (a .json file or a folder of them) with no model loaded",
    )
    parser.add_argument(
        "--no-compile",
        dest="compile",
        action="store_false",
        default=defaults.compile,
        help="decode eagerly: no static KV cache or CUDA graphs on a GPU",
    )
    parser.add_argument(
        "--decode",
        default=defaults.decode,
        choices=("auto", "static", "eager"),
        help="decode path: auto (static KV cache + CUDA graphs on CUDA, eager elsewhere), static or eager",
    )
    _engine_args(parser, defaults)
    args = parser.parse_args(argv)
    return load_settings(**{k: v for k, v in vars(args).items() if v is not None})


def _engine_args(parser: argparse.ArgumentParser, defaults: Settings) -> None:
    parser.add_argument(
        "--engine",
        default=defaults.engine,
        help="serving engine to use instead of an in-process model: "
        "llama.cpp, vllm or sglang (README: 'Bigger models')",
    )
    parser.add_argument(
        "--engine-url", default=defaults.engine_url, help="the engine's URL, e.g. http://127.0.0.1:8080"
    )
    parser.add_argument(
        "--engine-tokenizer",
        default=defaults.engine_tokenizer,
        help="the served model's tokenizer: a directory, .gguf file or Hub id (default: from the server)",
    )
    parser.add_argument(
        "--api-key",
        default=defaults.api_key,
        help="require this bearer token on the OpenAI-compatible API (/v1/...; default: none asked)",
    )
    parser.add_argument(
        "--engine-top-n",
        type=int,
        default=defaults.engine_top_n or None,
        help="alternatives per position (default: the server's maximum)",
    )


def create_demo(settings: Settings) -> Any:
    """Load the model (or connect to the serving engine) and build the Gradio app; with --replay,
    the recorded traces' app, with no model at all."""
    if settings.replay:
        from playground.traces import load_gallery
        from playground.ui.replay import build_replay_demo, check_drawable

        traces, skipped = load_gallery(settings.replay, check=check_drawable)
        for why in skipped:  # and in the page's header
            print(f"replay: skipped {why}", file=sys.stderr)
        return build_replay_demo(traces, skipped)
    from playground.ui.app import build_demo

    engine = create_engine(settings)
    return build_demo(engine, settings, draft=create_draft(settings, engine))


def create_engine(settings: Settings) -> Any:
    """The in-process model, or with --engine a RemoteEngine on a running llama-server, vLLM or SGLang."""
    if settings.engine:
        from playground.engine.remote import connect

        if not settings.engine_url:
            raise PlaygroundError(
                f"--engine {settings.engine} needs --engine-url (e.g. http://127.0.0.1:8080)."
            )
        return connect(
            settings.engine_url,
            settings.engine,
            tokenizer=settings.engine_tokenizer,
            top_n=settings.engine_top_n or None,
            timeout=settings.engine_timeout,
            api_key=settings.engine_api_key,
            progress=print,
        )
    from playground.engine.loading import load_model

    return load_model(
        settings.model,
        settings.device,
        settings.dtype,
        cache_dir=settings.cache_dir,
        trust_remote_code=settings.trust_remote_code,
        progress=print,
        decode=settings.decode if settings.compile else "eager",
        batching=settings.batching,
        quantize=settings.quantize,
    )


def create_draft(settings: Settings, engine: Any) -> Any:
    """--draft-model: a second in-process model with the same tokenizer, drafting for speculative
    decoding ("Under the hood"); None without it. A different tokenizer stops the start-up with
    one clear line."""
    if not settings.draft_model:
        return None
    from playground.engine.loading import load_model
    from playground.hood.speculative import check_draft

    draft = load_model(
        settings.draft_model,
        settings.device,
        settings.dtype,
        cache_dir=settings.cache_dir,
        trust_remote_code=settings.trust_remote_code,
        progress=print,
        decode="eager",
    )
    check_draft(engine, draft)
    return draft


def __getattr__(name: str) -> Any:
    """`app.demo` builds the app on first access (Spaces imports it); importing app is cheap."""
    global _demo
    if name == "demo":
        if _demo is None:
            _demo = create_demo(load_settings())
        return _demo
    raise AttributeError(name)


def opens_browser(settings: Settings) -> bool:
    """Open a browser only for a person at a desktop: asked (not --no-browser), started from a
    terminal (not a test, CI or a service), with a screen (not SSH or a container), not on Spaces."""
    desktop = sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    return settings.browser and interactive and desktop and not os.environ.get("SPACE_ID")


def ready_line(local_url: str, share_url: str | None, opened: bool) -> str:
    """The one line printed once the app serves (Gradio's own lines are quiet: its share hint names
    launch(), not our --share)."""
    where = f"Serving on {local_url.rstrip('/')}" + (" (opened in your browser)" if opened else "")
    share = f" · public link {share_url}" if share_url else " · --share for a public link"
    return f"{where}{share} · Ctrl+C stops it"


def main(argv: list[str] | None = None) -> int:
    """Run the app; on any start-up failure print one line `error: ...` and return 2."""
    # Our messages at INFO; other libraries' (httpx logs each request Gradio makes) only from WARNING.
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("playground").setLevel(logging.INFO)
    try:
        settings = parse_args(argv)
        demo = create_demo(settings)
        from playground.ui.app import launch_options

        opened = opens_browser(settings)
        _, local_url, share_url = demo.launch(
            server_name=settings.host,
            server_port=settings.port,
            share=settings.share,
            inbrowser=opened,
            quiet=True,
            prevent_thread_lock=True,
            **launch_options(settings, demo),
        )
        print(ready_line(local_url, share_url, opened), flush=True)
        demo.block_thread()
    except (PlaygroundError, OSError, RuntimeError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
