"""maze-gateway serving: Ray Serve LLM on vLLM with LoRA adapters from S3, one typed config."""

from serving.app import build_app
from serving.config import ServingConfig, load_config
from serving.embedded import ensure_embedded_gateway

__all__ = ["ServingConfig", "build_app", "ensure_embedded_gateway", "load_config"]
