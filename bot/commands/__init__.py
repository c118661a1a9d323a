"""The operator commands behind `burstbot` (the parser lives in `bot/cli.py`)."""
