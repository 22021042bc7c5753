"""maze-gateway serving: Ray Serve LLM on vLLM with LoRA adapters from S3, one typed config."""

from serving.config import ServingConfig, load_config

__all__ = ["ServingConfig", "load_config"]
