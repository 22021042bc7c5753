"""The adapter store (serving.adapters): store, aliases, canaries, resolver, S3 boundary."""
