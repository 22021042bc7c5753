"""maze-serve as a real command (serving.cli)."""
