"""Reading a model's config.json: the decoder's keys under every family's names, and loading one
safely from a file, a model directory or (online) the Hub."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from playground.errors import PlaygroundError

# --- reading a config ----------------------------------------------------------------------------

# Each quantity and the key names families use for it, in order of preference.
KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads", "multi_query_group_num"),
    "hidden": ("hidden_size", "n_embd", "d_model", "n_embed", "dim"),
    "head_dim": ("head_dim", "attention_head_dim", "kv_channels"),
    "context": ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx"),
}
_NESTED_TEXT_KEYS = ("text_config", "llm_config", "language_config")
NO_CACHE_TYPES = ("linear", "mamba", "conv", "recurrent", "ssm", "mlp", "moe", "dummy", "rwkv")


def text_dict(raw: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The decoder's part of a config.json and the prefix to name its keys ('text_config.' or '')."""
    for key in _NESTED_TEXT_KEYS:
        if isinstance(raw.get(key), Mapping):
            return dict(raw[key]), key + "."
    return dict(raw), ""


def _parse_json(config: str) -> dict[str, Any]:
    try:
        parsed = json.loads(config)
    except json.JSONDecodeError as exc:
        raise PlaygroundError(
            "The config is not valid JSON: {why} at line {line}, column {column}.",
            key="kv.error.json",
            why=exc.msg,
            line=exc.lineno,
            column=exc.colno,
        ) from exc
    if not isinstance(parsed, dict):
        raise PlaygroundError(
            "A config.json must be a JSON object {{...}}, got {kind}.",
            key="kv.error.json_object",
            kind=type(parsed).__name__,
        )
    return parsed


def as_config_dict(config: Any) -> dict[str, Any]:
    """A config given as a dict, a JSON string or a transformers config object -> a plain dict."""
    if isinstance(config, str):
        return _parse_json(config)
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "to_dict"):
        return config.to_dict()
    raise PlaygroundError(
        "Expected a config.json dict or a transformers config, got {kind}.",
        key="kv.error.config_type",
        kind=type(config).__name__,
    )


def _config_class(model_type: Any) -> Any:
    """The transformers config class for a model_type, or None when transformers does not know it."""
    if not isinstance(model_type, str):
        return None
    from transformers import CONFIG_MAPPING

    try:
        return CONFIG_MAPPING[model_type]
    except KeyError:
        return None


def _known_keys(cls: Any) -> set[str]:
    fields = set(getattr(cls, "__dataclass_fields__", {}))
    return fields | set(getattr(cls, "attribute_map", {})) | {n for n in dir(cls) if not n.startswith("_")}


def _normalize_aliases(text: dict[str, Any], cls: Any) -> dict[str, Any]:
    """Rename a family key the class does not know (say n_layer for a class that wants num_hidden_layers)."""
    known = _known_keys(cls)
    out = dict(text)
    for names in KEY_ALIASES.values():
        if any(n in out and n in known for n in names):
            continue
        present = next((n for n in names if n in out), None)
        target = next((n for n in names if n in known), None)
        if present and target:
            out[target] = out.pop(present)
    return out


def build_config_object(raw: dict[str, Any]) -> Any:
    """The decoder config object transformers itself would build (class defaults and all), or None."""
    cls = _config_class(raw.get("model_type"))
    if cls is None:
        return None
    text, prefix = text_dict(raw)
    try:
        if prefix:
            text_cls = _config_class(text.get("model_type"))
            text = _normalize_aliases(text, text_cls) if text_cls else text
            obj = cls(**{**raw, prefix[:-1]: text})
        else:
            obj = cls(**_normalize_aliases(raw, cls))
        return obj.get_text_config(decoder=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise PlaygroundError(
            "transformers rejects this {model_type!r} config: {why}",
            key="kv.error.rejected",
            model_type=raw.get("model_type"),
            why=first,
        ) from exc


CONFIG_NAME = "config.json"  # the only file name the loader opens
MAX_CONFIG_BYTES = 4 * 2**20  # larger than any published config.json; refuse bigger files unread
_MODEL_MARKERS = ("model_type", "architectures", *(k for keys in KEY_ALIASES.values() for k in keys))
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def load_config_file(path_or_id: str) -> dict[str, Any]:
    """A model's config.json from a local file named config.json, a model directory holding one, or a
    Hub id when online. Anything else is refused, and a refused file's content is never echoed: the app
    may be reachable by others (--host 0.0.0.0, --share, Spaces)."""
    text = str(path_or_id or "").strip()
    if not text:
        raise PlaygroundError(
            "Enter a path to a config.json (or its model directory) or a Hub model id.",
            key="kv.error.no_path",
        )
    path = Path(text).expanduser()
    if _HUB_ID.fullmatch(text) and not text.endswith(".json") and not path.exists():
        return _require_model_config(_config_from_hub(text), repr(text))
    return _require_model_config(_read_local_config(_local_config_path(path)), str(path))


def _local_config_path(path: Path) -> Path:
    """`path` itself if it is a file named config.json, or the config.json in a model directory."""
    if path.is_dir():
        if not (path / CONFIG_NAME).is_file():
            raise PlaygroundError(
                "The directory {path} has no config.json: give a model directory.",
                key="kv.error.no_config",
                path=path,
            )
        return path / CONFIG_NAME
    if path.name != CONFIG_NAME:
        raise PlaygroundError(
            "Refused {path}: only a file named config.json (or a model directory holding one) "
            "can be loaded, or a Hub id such as Qwen/Qwen2.5-7B.",
            key="kv.error.not_config_name",
            path=path,
        )
    if not path.is_file():
        raise PlaygroundError(
            "No file {path}: give an existing config.json or model directory.",
            key="kv.error.no_file",
            path=path,
        )
    return path


def _read_local_config(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise PlaygroundError(
                "Refused {path}: over {mib} MiB, not a model config.",
                key="kv.error.too_big",
                path=path,
                mib=MAX_CONFIG_BYTES // 2**20,
            )
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlaygroundError(
            "Cannot read {path}: {why}.",
            key="kv.error.unreadable",
            path=path,
            why=exc.strerror or type(exc).__name__,
        ) from exc
    except UnicodeDecodeError as exc:
        raise PlaygroundError(
            "Refused {path}: not UTF-8 text, so not a model config.", key="kv.error.not_utf8", path=path
        ) from exc
    return _parse_json(raw)


def _require_model_config(config: dict[str, Any], where: str) -> dict[str, Any]:
    """Refuse JSON that is not a model config, naming what is missing but none of what is there."""
    text, _ = text_dict(config)
    if any(key in part for part in (config, text) for key in _MODEL_MARKERS):
        return config
    raise PlaygroundError(
        "Refused {where}: it does not look like a model config. It has no model_type, no architectures, "
        "and none of the layer/head keys the calculator needs ({keys}).",
        key="kv.error.not_a_model",
        where=where,
        keys=[", ".join(KEY_ALIASES[q]) for q in ("layers", "heads", "hidden")],
    )


HUB_TIMEOUT_S = 2.0  # how long the Hub gets to answer a connection before "unreachable" is said


def _config_from_hub(model_id: str) -> dict[str, Any]:
    """config.json of a Hub model. Offline (HF_HUB_OFFLINE=1, or no connection to the Hub within
    HUB_TIMEOUT_S) it says so at once, instead of huggingface_hub's retries (many seconds, a warning
    each in the console)."""
    import os

    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise PlaygroundError(
            "{model_id!r} is not a local file or directory, and the Hub is offline here.",
            key="kv.error.offline",
            model_id=model_id,
        )
    unreachable = hub_unreachable()
    if unreachable:
        raise PlaygroundError(
            "{model_id!r} is not a local file or directory, and the Hub cannot be reached from here "
            "({why}): give a local config.json or model directory.",
            key="kv.error.unreachable",
            model_id=model_id,
            why=unreachable,
        )
    try:
        from huggingface_hub import hf_hub_download

        return _parse_json(open(hf_hub_download(model_id, "config.json"), encoding="utf-8").read())
    except PlaygroundError:
        raise
    except Exception as exc:  # network, auth and not-found errors all end up here
        raise PlaygroundError(
            "Cannot fetch config.json for {model_id!r} from the Hub: {why}",
            key="kv.error.hub",
            model_id=model_id,
            why=str(exc),
        ) from exc


def hub_unreachable(timeout: float = HUB_TIMEOUT_S) -> str | None:
    """Why the Hub (huggingface_hub's endpoint, HF_ENDPOINT) takes no connection from here, or None."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"{host}: {exc.strerror or exc}"
