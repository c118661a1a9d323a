"""burstbot: answer each burst of chat messages exactly once."""

__version__ = "0.1.0"
