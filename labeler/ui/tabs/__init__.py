"""One module per tab; each exposes TITLE and build(ctx) (see labeler/ui/app.py)."""
