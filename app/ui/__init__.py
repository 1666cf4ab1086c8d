"""Gradio front end: one module per tab and the API endpoints, on AppState (state.py). It consumes engine
events, model-manager results and the Pair lab; nothing else imports it."""
