"""The OpenAI-compatible routes on the app's own server: `/v1/models`, `/v1/chat/completions` and
`/v1/completions`, streaming (server-sent events) and not.

Each request runs in a thread of its own, through `Engine.stream` (generate.py), and hands its pieces
to the response as they come; a client that goes away (or a stop string) cancels it, and the engine
takes it out of the running batch at the next iteration. Every failure is an OpenAI-style JSON error
with a message, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute

from playground.api.generate import Generation, Piece, chat_prompt, completion_prompt, pieces, prepare
from playground.api.lookup import ModelLookup
from playground.api.params import ApiError, Params, chat_body, completion_body
from playground.api.shapes import Reply, model_card, model_list
from playground.engine.base import Engine
from playground.engine.control import Control
from playground.errors import PlaygroundError

log = logging.getLogger(__name__)
DISCONNECT_POLL_S = 0.25  # how often a waiting request checks that its client is still there
_END = object()
Handler = Callable[[Request], Awaitable[Response]]


def openai_routes(
    models: ModelLookup,
    *,
    api_key: str | None = None,
    max_tokens_limit: int = 1024,
    unbatched_places: int = 2,
) -> list[BaseRoute]:
    """The routes, to give the app's FastAPI app (gradio's `launch(app_kwargs={"routes": ...})`).
    models: which engine serves which model name; api_key: required as a bearer token when set;
    unbatched_places: requests answered at once by an engine without a running batch (the rest wait
    in turn, as the app's model events do with batching off)."""
    api = OpenAIApi(models, api_key, max_tokens_limit, unbatched_places)
    router = APIRouter(prefix="/v1")
    router.add_api_route("/models", api.guarded(api.list_models), methods=["GET"])
    router.add_api_route("/models/{name:path}", api.guarded(api.show_model), methods=["GET"])
    router.add_api_route("/chat/completions", api.guarded(api.chat), methods=["POST"])
    router.add_api_route("/completions", api.guarded(api.completions), methods=["POST"])
    return list(router.routes)


class OpenAIApi:
    def __init__(self, models: ModelLookup, api_key: str | None, max_tokens_limit: int, places: int) -> None:
        self.models, self.api_key, self.limit = models, api_key or None, max_tokens_limit
        self.created, self.unbatched_places = int(time.time()), places
        # per engine: requests answered at once; an unloaded engine's entry goes with it (an id()
        # key would stay, and a later engine at the same address would take its places)
        self._places: weakref.WeakKeyDictionary[Engine, threading.Semaphore] = weakref.WeakKeyDictionary()
        self._places_lock = threading.Lock()

    def guarded(self, handler: Handler) -> Handler:
        """handler behind the API key, its errors answered as OpenAI errors."""

        async def endpoint(request: Request) -> Response:
            try:
                self.check_key(request)
                return await handler(request)
            except ApiError as exc:
                return JSONResponse(exc.body(), status_code=exc.status)
            except PlaygroundError as exc:  # the engine refused the request (a bad value, out of memory)
                return JSONResponse(ApiError(str(exc)).body(), status_code=400)
            except Exception as exc:  # a bug: said in one line, logged with its traceback
                log.exception("OpenAI API request failed")
                return JSONResponse(ApiError(_internal(exc), 500).body(), status_code=500)

        endpoint.__name__ = handler.__name__
        return endpoint

    def check_key(self, request: Request) -> None:
        if self.api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip(), self.api_key):
            raise ApiError(
                "Invalid or missing API key: send it as 'Authorization: Bearer <key>'.",
                401,
                code="invalid_api_key",
            )

    async def list_models(self, request: Request) -> Response:
        return JSONResponse(model_list(self.models.names(), self.created))

    async def show_model(self, request: Request) -> Response:
        name = request.path_params["name"]
        self.engine(name)
        return JSONResponse(model_card(name, self.created))

    def engine(self, name: str) -> Engine:
        engine = self.models.engine(name)
        if engine is None:
            known = ", ".join(self.models.names()) or "none"
            raise ApiError(
                f"The model '{name}' does not exist here. Models: {known}.", 404, "model", "model_not_found"
            )
        return engine

    async def chat(self, request: Request) -> Response:
        body = chat_body(await _json(request), self.limit)
        engine = self.engine(body.params.model)
        return await self.answer(request, engine, body.params, chat_prompt(engine, body), chat=True)

    async def completions(self, request: Request) -> Response:
        body = completion_body(await _json(request), self.limit)
        engine = self.engine(body.params.model)
        return await self.answer(request, engine, body.params, completion_prompt(engine, body), chat=False)

    async def answer(
        self, request: Request, engine: Engine, params: Params, prompt: list[int], chat: bool
    ) -> Response:
        run, control = prepare(engine, prompt, params, self.limit), Control()
        reply = Reply(params.model, chat, engine.tokenizer, params.logprobs)
        stream = relay(request, lambda: self.in_turn(engine, control, pieces(engine, run, control)), control)
        if not params.stream:
            return JSONResponse(reply.whole([piece async for piece in stream], run))
        first = await anext(stream, None)  # errors before the first token still get their status
        events = sse(reply, run, params, first, stream)
        return StreamingResponse(
            events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    def in_turn(self, engine: Engine, control: Control, answer: Iterator[Piece]) -> Iterator[Piece]:
        """answer once the engine has a place for it: a running batch has its own (its queue), an engine
        without one answers `unbatched_places` requests at once. A request cancelled while it waits ends."""
        with self._places_lock:
            places = self._places.get(engine)
            if places is None:
                places = self._places[engine] = threading.Semaphore(
                    engine.concurrency or self.unbatched_places
                )
        while not places.acquire(timeout=DISCONNECT_POLL_S):
            control.check()
        try:
            with self.models.keep(engine):
                yield from answer
        finally:
            places.release()


async def sse(
    reply: Reply, run: Generation, params: Params, first: Piece | None, rest: AsyncIterator[Piece]
) -> AsyncIterator[str]:
    """The stream's events: a chunk per piece, the usage chunk if asked for, then [DONE]. An error
    after the first chunk is an error event (the status line has been sent)."""
    try:
        if first is not None:
            yield _event(reply.chunk(first, first=True))
        async for piece in rest:
            yield _event(reply.chunk(piece))
        if params.include_usage:
            yield _event(reply.usage_chunk(run))
    except PlaygroundError as exc:
        yield _event(ApiError(str(exc)).body())
    except Exception as exc:  # a bug: one line to the client, the traceback to the log
        log.exception("OpenAI API stream failed")
        yield _event(ApiError(_internal(exc), 500).body())
    yield "data: [DONE]\n\n"


async def relay(
    request: Request, produce: Callable[[], Iterator[Piece]], control: Control
) -> AsyncIterator[Piece]:
    """Run produce() in a thread of its own and hand its pieces over as they come; a client that goes
    away (or a consumer that stops early) cancels the request."""
    loop, queue = asyncio.get_running_loop(), asyncio.Queue()
    threading.Thread(target=_work, args=(produce, loop, queue), name="openai-request", daemon=True).start()
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), DISCONNECT_POLL_S)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    return
                continue
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        control.cancel()  # gone or done: a running request stops at its next token


def _work(
    produce: Callable[[], Iterator[Piece]], loop: asyncio.AbstractEventLoop, queue: asyncio.Queue
) -> None:
    def put(item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the server closed its loop: nobody to tell
            loop.call_soon_threadsafe(queue.put_nowait, item)

    try:
        for piece in produce():
            put(piece)
    except BaseException as exc:  # handed to the response, which answers it
        put(exc)
    else:
        put(_END)


async def _json(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(f"The request body is not valid JSON: {exc}.") from None


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _internal(exc: Exception) -> str:
    return f"The server failed to answer: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
