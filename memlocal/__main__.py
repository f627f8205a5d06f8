"""``python -m memlocal`` runs the CLI."""

from .cli import main

main()
