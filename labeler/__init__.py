"""RLHF Studio, the application: services (the one API), the Gradio UI and the command line."""
