"""`burstbot` command line: the parser (`main.py`) and one module per operator command."""

from bot.cli.main import main

__all__ = ["main"]
