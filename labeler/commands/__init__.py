"""Subcommand groups of rlhf-studio, one module each (see labeler/cli.py)."""
