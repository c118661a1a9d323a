"""The core: neutral events, the store's protocols, the engine, the outbox and the scheduler.

It imports nothing from adapters/, storage/, bot.ops or bot.cli (tests/test_layout.py checks).
"""
