"""An OpenAI-compatible API on the app's own server, the same engine and running batch as the tabs.

    from playground.api import OneModel, openai_routes
    routes = openai_routes(OneModel(engine), api_key=None, max_tokens_limit=1024)
    demo.launch(app_kwargs={"routes": routes})   # playground.ui.app does this for you

params.py reads and checks the request bodies, generate.py runs a request through `Engine.stream`,
shapes.py builds the response objects, routes.py serves them (FastAPI, server-sent events),
lookup.py says which engine serves which model name.
"""

from playground.api.lookup import ModelLookup, OneModel, RegistryModels, model_id
from playground.api.routes import openai_routes

__all__ = ["ModelLookup", "OneModel", "RegistryModels", "model_id", "openai_routes"]
