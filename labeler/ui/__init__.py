"""The Gradio web UI: a factory (app.py), forms built from config dataclasses, one module per tab."""
