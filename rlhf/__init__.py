"""A TRL-style library for RLHF on torch, transformers, accelerate and peft.

Imports neither storage nor gradio: metrics leave through callbacks (see tracking.py).
"""
from rlhf.loading import DEFAULT_ENCODER, DEFAULT_POLICY, default_encoder_path, default_model_path
