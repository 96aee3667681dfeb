"""Convert the embedded SmolLM2-135M-Instruct GGUF to a cached safetensors folder (once) and print it."""
from rlhf.loading import default_encoder_path, default_model_path

if __name__ == "__main__":
    print(f"default policy: {default_model_path()}")
    print(f"default encoder: {default_encoder_path()}")
