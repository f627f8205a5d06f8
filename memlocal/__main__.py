"""``python -m memlocal`` runs the CLI."""

from .faces.cli import main

main()
