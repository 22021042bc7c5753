"""The local stacks (serving.local): the embedded stack's process and port handling."""
