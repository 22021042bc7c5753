"""Keys, per-key limits, usage and the key gate (serving.auth)."""
