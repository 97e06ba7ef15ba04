"""``python -m memcore`` runs the CLI."""

from memcore.cli import main

main()
