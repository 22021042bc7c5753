"""``python -m training.cli``: the same as the ``maze-train`` command."""

from training.cli import main

main()
