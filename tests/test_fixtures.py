def test_tiny_models_build(tiny_model_dir, tiny_encoder_dir):
    """The shared fixtures (tests/conftest.py) build the tiny models every trainer test uses."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    assert AutoModelForCausalLM.from_pretrained(tiny_model_dir).config.num_hidden_layers == 2
    assert AutoModelForSequenceClassification.from_pretrained(tiny_encoder_dir).config.num_labels == 1
