"""``python -m serving.cli``: the same as the ``maze-serve`` command."""

from serving.cli import main

main()
