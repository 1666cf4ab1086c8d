"""The OpenAI-compatible API and ``/metrics`` (FastAPI routes) over the headless service; ``launcher.py serve``
runs them alone, the UI mounts the same routes on its own server. Never imports ``app.ui``."""
