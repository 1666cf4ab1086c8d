"""Gradio front end. It only consumes engine events and model-manager results."""
