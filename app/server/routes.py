"""Every API route on one server: the OpenAI-compatible endpoints (``openai_api``) and Ollama's (``ollama_api``),
bound to one state, one Guard and one generation queue. ``serve`` and the app's own server mount them here."""

from __future__ import annotations

from typing import Optional

from fastapi import FastAPI

from app.server import ollama_api, openai_api
from app.server.guard import Guard
from app.engine.llama.promptcache import PromptCache
from app.service.state import AppState

ROUTES = {**openai_api.ROUTES, **ollama_api.ROUTES}  # the exact paths (the /v1/ prefix covers the rest)


def mount(app: FastAPI, state: AppState, api_key: Optional[str] = None, guard: Optional[Guard] = None,
          prompt_cache: Optional[PromptCache] = None) -> openai_api.OpenAIApi:
    """Add the OpenAI-compatible and Ollama endpoints to a FastAPI app (``serve``'s, or Gradio's ``demo.app``);
    ``prompt_cache``: the one the command line sized, which replaces the state's default."""
    if prompt_cache is not None:
        state.prompt_cache = prompt_cache
    api = openai_api.mount(app, state, api_key, guard)
    ollama_api.mount(app, api)
    return api
