"""Gradio front end: ``app.py`` builds the Blocks app around one AppState (``app.service.state``), one module
per tab in ``tabs/``, the ``/chat`` and ``/compare`` endpoints (``api.py``) and the HTML they render (panel,
reply, race, style). Only this package imports Gradio; the work is the service's; nothing but the command line
imports it."""
