"""The headless service: the app's state, its generation FIFO and runner, settings, baselines and speedup claims,
"make it faster" and loading a pair. No Gradio and no HTTP here: the UI (``app.ui``), the API (``app.server``)
and the command line (``app.cli``) are front ends over it."""
