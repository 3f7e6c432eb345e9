"""LLM generation playground: the engine (no UI imports outside playground.ui)."""
