"""The core: neutral events, the Store protocol, the engine, delivery and the scheduler.

It imports nothing from adapters/, storage/, bot.ops or bot.cli (tests/test_layout.py checks).
"""
