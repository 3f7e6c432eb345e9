"""The only code that runs a model. Every feature reaches the model through an `Engine`:

    from playground.engine import load_model
    engine = load_model()                      # in-process transformers model (embedded default)
    rows = engine.sync("my-seq", ids)          # scores after ids; the KV cache is kept under the key
    rows = engine.sync("my-seq", ids + [42])   # one more token: one forward of one token

    engine = connect("http://127.0.0.1:8080", "llama.cpp")   # the same interface over a serving engine

See base.py for the interface, local.py for the transformers implementation, remote/ for
llama.cpp's llama-server, vLLM and SGLang over HTTP.
"""

from playground.engine.base import Capabilities, DecodePlan, Engine, Progress
from playground.engine.control import Control
from playground.engine.loading import load_model
from playground.engine.local import LocalEngine
from playground.engine.records import Alternative, TokenRecord
from playground.engine.remote import RemoteEngine, connect
from playground.engine.sampling import SamplingSettings

__all__ = [
    "Alternative",
    "Capabilities",
    "Control",
    "DecodePlan",
    "Engine",
    "LocalEngine",
    "Progress",
    "RemoteEngine",
    "SamplingSettings",
    "TokenRecord",
    "connect",
    "load_model",
]
