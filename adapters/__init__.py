"""Platform adapters: platform events to `bot.core.events` and replies back, nothing more."""
