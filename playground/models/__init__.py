"""Several models in one process: what can be loaded, what it will cost, and the engine for model X.

    from playground.models import ModelRegistry
    registry = ModelRegistry()
    print(registry.estimate("gemma-3-270m").line())   # before loading: parameters, bytes
    gemma = registry.engine("gemma-3-270m", progress=print)
    smol = registry.engine("smollm2-135m-instruct")

See registry.py (the bound: least recently used unloaded, or a clear refusal), estimate.py and
catalog.py.
"""

from playground.models.catalog import ModelEntry, cached_hub_models, hub_online, model_name
from playground.models.estimate import MemoryEstimate, estimate_memory
from playground.models.registry import LoadEvent, ModelRegistry, model_key

__all__ = [
    "LoadEvent",
    "MemoryEstimate",
    "ModelEntry",
    "ModelRegistry",
    "cached_hub_models",
    "estimate_memory",
    "hub_online",
    "model_key",
    "model_name",
]
