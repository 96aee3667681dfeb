"""The one API that the UI, the CLI and the tests call. Plain functions taking an explicit db; no gradio."""
