"""``python -m evaluation.cli``: the same as the ``maze-eval`` command."""

from evaluation.cli import main

main()
