"""Helpers shared by every tab: named wiring, error translation, the model queue settings."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gradio as gr
import torch

from playground.errors import PlaygroundError
from playground.ui.crowd import mark_queue_status
from playground.ui.i18n import localize, session_lang, t

log = logging.getLogger(__name__)

# Every event that runs the model shares this queue, so one model serves sessions in turn.
MODEL_QUEUE = "model"
_model_queue = {"concurrency_limit": 2}  # set from Settings.model_concurrency by build_demo


def set_model_concurrency(limit: int) -> None:
    """How many model events may run at once (the rest wait in the shared queue)."""
    if limit < 1:
        raise PlaygroundError(f"model concurrency must be at least 1, got {limit}")
    _model_queue["concurrency_limit"] = limit


def model_event() -> dict[str, Any]:
    """Keyword arguments for an event that touches the model (shared queue + limit)."""
    return {"concurrency_id": MODEL_QUEUE, **_model_queue}


def model_handler(handler: Callable) -> Callable:
    """A handler that runs the model: clear errors, and a GPU on ZeroGPU Spaces."""
    return friendly_errors(on_gpu(handler))


def on_gpu(handler: Callable) -> Callable:
    """@spaces.GPU on Hugging Face ZeroGPU (a GPU is attached for the call); unchanged elsewhere."""
    try:
        import spaces
    except ImportError:
        return handler
    return spaces.GPU(handler)


def explain_exception(exc: BaseException, lang: str = "en") -> str:
    """A one-line, user-facing message for any failure (never a stack trace), in lang."""
    if isinstance(exc, PlaygroundError):
        return localize(exc.message, lang)
    if isinstance(exc, torch.OutOfMemoryError):
        return t("shared.out_of_memory", lang)
    log.exception("Unexpected error in a handler")
    return t("shared.unexpected", lang, kind=type(exc).__name__, detail=str(exc)[:200])


def friendly_errors(handler: Callable) -> Callable:
    """Turn engine errors into gr.Error (a red toast in the UI, an error through the API) in the
    session's language: the wrapper takes the request (Gradio fills it) even when handler does not.
    A user's error is no server fault: no traceback in the console (explain_exception logs
    unexpected ones)."""
    signature, takes_request = with_request(handler)
    call = functools.partial(_split_request, signature, takes_request)

    if inspect.isgeneratorfunction(handler):

        @functools.wraps(handler)
        def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
            args, kwargs, request = call(args, kwargs)
            try:
                yield from handler(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:  # every failure becomes a clear message
                raise _explained(exc, request) from None

        wrapper = generator_wrapper
    else:

        @functools.wraps(handler)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            args, kwargs, request = call(args, kwargs)
            try:
                return handler(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:  # every failure becomes a clear message
                raise _explained(exc, request) from None

    wrapper.__signature__ = signature  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**_hints(handler), "request": gr.Request}
    return wrapper


def _split_request(
    signature: inspect.Signature, takes_request: bool, args: tuple, kwargs: dict
) -> tuple[tuple, dict, Any]:
    """A wrapped handler's arguments, and the request (kept in them when the handler takes it)."""
    bound = signature.bind(*args, **kwargs)
    request = bound.arguments.get("request")
    if not takes_request:
        bound.arguments.pop("request", None)
    return bound.args, bound.kwargs, request


def _explained(exc: Exception, request: Any) -> gr.Error:
    """gr.Error for any failure, in the language of the request's page."""
    lang = session_lang(request)
    return gr.Error(explain_exception(exc, lang), title=t("app.toast.error", lang), print_exception=False)


def warn(message: str, lang: str) -> None:
    """A warning toast, titled in the page's language (Gradio 6's toast shows its type in English
    instead: static/i18n.js retitles it in the browser)."""
    gr.Warning(message, title=t("app.toast.warning", lang))


def with_request(fn: Callable) -> tuple[inspect.Signature, bool]:
    """fn's signature with a `request` parameter (added last, before any **kwargs, when fn has none),
    and whether fn has one of its own."""
    signature = inspect.signature(fn)
    if "request" in signature.parameters:
        return signature, True
    params = list(signature.parameters.values())
    tail = [p for p in params if p.kind == p.VAR_KEYWORD]
    head = [p for p in params if p.kind != p.VAR_KEYWORD]
    varargs = any(p.kind in (p.VAR_POSITIONAL, p.KEYWORD_ONLY) for p in head)
    kind = inspect.Parameter.KEYWORD_ONLY if varargs else inspect.Parameter.POSITIONAL_OR_KEYWORD
    request = inspect.Parameter("request", kind, default=None, annotation=gr.Request)
    return signature.replace(parameters=[*head, request, *tail]), False


def _hints(fn: Callable) -> dict[str, Any]:
    """fn's annotations resolved (Gradio finds gr.Request and gr.Progress by them), {} if they can't be."""
    try:
        return typing.get_type_hints(fn)
    except (NameError, TypeError):
        return dict(getattr(fn, "__annotations__", {}) or {})


def as_number(value: Any, name: str) -> float:
    """A control's value as a float (numbers, or numeric text from the API); the error names it."""
    try:
        number = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    if number != number:  # NaN, or not a number at all
        raise PlaygroundError(
            "{name} must be a number, got {value!r}", key="shared.not_a_number", name=name, value=value
        )
    return number


def as_whole(value: Any, name: str) -> int:
    """A control's value as an int: 42, 42.0 or '42' (text is read exactly, not via float)."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value.strip())
    number = as_number(value, name)
    if not number.is_integer():
        raise PlaygroundError(
            "{name} must be a whole number, got {value!r}", key="shared.not_whole", name=name, value=value
        )
    return int(number)


def table_rows(value: Any) -> list[list[Any]]:
    """A Dataframe's value as it arrives in a handler (pandas, a {"data": ...} dict, None) as rows."""
    if value is None:
        return []
    if hasattr(value, "values") and hasattr(value, "columns"):  # pandas.DataFrame
        return value.values.tolist()
    if isinstance(value, dict):
        return list(value.get("data") or [])
    return [list(row) for row in value]


def parse_seed(seed: str | float | None) -> int | None:
    """'' or None -> None (random); '42', 42 or 42.0 -> 42; anything else is refused."""
    if seed is None or not str(seed).strip():
        return None
    try:
        return as_whole(seed, "seed")
    except PlaygroundError:
        raise PlaygroundError(
            "seed must be a whole number (or empty for random), got {seed!r}",
            key="seed.error.whole",
            seed=seed,
        ) from None


class UncheckedSlider(gr.Slider):
    """A slider that lets out-of-range API values through, so the engine's message (which
    names the setting and its allowed range) reaches the user instead of a generic one."""

    def get_block_name(self) -> str:
        return "slider"

    def preprocess(self, payload: float) -> float:
        return payload


# --- named wiring ------------------------------------------------------------------------------------

Widgets = Mapping[str, Any]  # a tab's components by name
_INJECTED = {"self", "request", "progress", "event"}  # parameters Gradio fills itself


def input_names(fn: Callable) -> list[str]:
    """The names of the components a handler reads, in order: its parameters (gr.Request and
    gr.Progress excluded), a parameter annotated with a dataclass standing for its fields."""
    groups = _groups(fn)
    names: list[str] = []
    for name in inspect.signature(fn).parameters:
        if name in groups:
            names += [f.name for f in dataclasses.fields(groups[name])]
        elif name not in _INJECTED:
            names.append(name)
    return names


def _groups(fn: Callable) -> dict[str, type]:
    """A handler's parameters annotated with a dataclass (a group of components' values)."""
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError):  # an annotation that only names a type for the type checker
        return {}
    return {
        name: hint
        for name, hint in hints.items()
        if isinstance(hint, type) and dataclasses.is_dataclass(hint)
    }


def grouped_inputs(fn: Callable) -> Callable:
    """fn as Gradio calls it: one parameter per component, each group's fields in its place, and
    the group rebuilt from them for fn. The API therefore names each field, as if fn had them."""
    groups = _groups(fn)
    if not groups:
        return fn
    hints = typing.get_type_hints(fn)
    params: list[inspect.Parameter] = []
    annotations: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.name not in groups:
            params.append(param)
            annotations[param.name] = hints.get(param.name, param.annotation)
            continue
        field_hints = typing.get_type_hints(groups[param.name])
        for f in dataclasses.fields(groups[param.name]):
            params.append(inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD))
            annotations[f.name] = field_hints.get(f.name, Any)
    flat = inspect.Signature(params)

    def regroup(args: tuple, kwargs: dict) -> dict[str, Any]:
        values = dict(flat.bind(*args, **kwargs).arguments)
        for name, group in groups.items():
            values[name] = group(**{f.name: values.pop(f.name) for f in dataclasses.fields(group)})
        return values

    if inspect.isgeneratorfunction(fn):

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            yield from fn(**regroup(args, kwargs))
    else:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(**regroup(args, kwargs))

    functools.update_wrapper(wrapper, fn)
    wrapper.__signature__ = flat  # type: ignore[attr-defined]
    wrapper.__annotations__ = annotations  # resolved: Gradio finds gr.Request by its type
    return wrapper


def error_on_status(fn: Callable, status: str) -> Callable:
    """A streaming handler whose error (a gr.Error: the toast) also goes on its status line, unless
    the line says it already (the handler's own words, "Not answered: …"): the line never keeps an
    older event's words ("Stopped before the first token" after a refused seed)."""
    if not inspect.isgeneratorfunction(fn):
        return fn

    @functools.wraps(fn)
    def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
        shown = ""
        try:
            for values in fn(*args, **kwargs):
                if isinstance(values, dict) and status in values:
                    shown = str(values[status])
                yield values
        except gr.Error as exc:
            if exc.message not in shown:
                yield {status: exc.message}
            raise

    return generator_wrapper


def checked_inputs(fn: Callable, components: Sequence[Any]) -> Callable:
    """fn with the value of each input whose component checks it (a `checked` method: ui/ranges.py)
    checked first; a refusal is a PlaygroundError, so friendly_errors says it in the page's language.
    Gradio hands the inputs over first and in order, positionally."""
    checks = [(i, c.checked) for i, c in enumerate(components) if callable(getattr(c, "checked", None))]
    if not checks:
        return fn

    def check(args: tuple) -> list:
        values = list(args)
        for i, checked in checks:
            if i < len(values):
                values[i] = checked(values[i])
        return values

    if inspect.isgeneratorfunction(fn):

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            yield from fn(*check(args), **kwargs)
    else:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*check(args), **kwargs)

    return functools.update_wrapper(wrapper, fn)


def named_outputs(fn: Callable, widgets: Widgets) -> Callable:
    """fn returns (or yields) {name: value}; the wrapper gives Gradio {component: value}, so every
    output is set by name and an output a handler does not name is left as it is."""

    def convert(values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        if not values:  # nothing to set (a page load without a link): Gradio reads {} as one value
            return gr.skip()
        return {widgets[name]: value for name, value in values.items()}

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
            for values in fn(*args, **kwargs):
                yield convert(values)

        return generator_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return convert(fn(*args, **kwargs))

    return wrapper


def connect(
    trigger: Any,
    fn: Callable,
    widgets: Widgets,
    outputs: Sequence[str],
    *,
    api_name: str | None,
    status: str | None = None,
    model: bool = True,
    **event: Any,
) -> Any:
    """Wire fn to trigger (an event listener like button.click, or a list of them) by name: its
    parameters name its input components (a parameter annotated with a dataclass: one component
    per field, see grouped_inputs), `outputs` the components its {name: value} results may set.

    model: the event runs the model (the shared model queue, clear errors, a GPU on ZeroGPU).
    status: the component that shows queue position, estimate and progress, and the error mark, so
    that no error ever covers an input or the content (the message itself is a toast); an explicit
    show_progress_on=[...] (a move between tabs: both tabs' status lines) replaces it."""
    inputs = [widgets[name] for name in input_names(fn)]
    flat = checked_inputs(grouped_inputs(fn), inputs)
    guarded = model_handler(flat) if model else friendly_errors(flat)
    handler = named_outputs(guarded if status is None else error_on_status(guarded, status), widgets)
    options: dict[str, Any] = {**(model_event() if model else {"concurrency_limit": None}), **event}
    if api_name is None:
        options["api_visibility"] = "private"
    else:
        options["api_name"] = api_name
    if status is not None:
        options.setdefault("show_progress_on", [widgets[status]])
    else:
        options.setdefault("show_progress", "hidden")
    for component in options.get("show_progress_on") or []:
        mark_queue_status(component)  # the queue position shows there as a line of text
    output_components = [widgets[name] for name in outputs]
    if isinstance(trigger, (list, tuple)):
        return gr.on(list(trigger), handler, inputs, output_components, **options)
    return trigger(handler, inputs, output_components, **options)


def connect_after_ticket(
    trigger: Any,
    ticket_fn: Callable,
    ticket_outputs: Sequence[str],
    fn: Callable,
    widgets: Widgets,
    outputs: Sequence[str],
    *,
    api_name: str | None,
    **event: Any,
) -> Any:
    """connect(trigger, fn, ...) for a request that Stop ends without Gradio's `cancels` (a
    cancelled event sometimes leaves an "Error" mark on its status line, a race in Gradio's front
    end): ticket_fn first hands out a ticket into a state of ticket_outputs (at once, outside the
    queue; the trigger's event data, which fn would not get, may go in the others), then fn runs
    with it, and a Stop while it waits drops it (Workspace.ticket). The first event takes the
    trigger mode: "once" (the default) ignores a second click while fn is pending."""
    mode = {"trigger_mode": event["trigger_mode"]} if "trigger_mode" in event else {}
    first = {"api_name": None, "model": False, "queue": False, **mode}
    asked = connect(trigger, ticket_fn, widgets, ticket_outputs, **first)
    return connect(asked.then, fn, widgets, outputs, api_name=api_name, **event)
