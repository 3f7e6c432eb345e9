"""Kept for notebooks written against round 1: loading lives in playground.engine now."""

from playground.engine.loading import embedded_cache_dir, load_model, resolve_device, verify_cache
from playground.engine.local import LocalEngine

LoadedModel = LocalEngine  # the in-process engine is what load_model() returns

__all__ = ["LoadedModel", "embedded_cache_dir", "load_model", "resolve_device", "verify_cache"]
