"""Platform adapters: translate platform events to `bot.events` and replies back, nothing more."""
