"""Benchmarks: burstbot against the baselines a chat bot would otherwise use, in one run.

Run `python -m benchmarks` (full, a few minutes) or `python -m benchmarks --quick` (seconds); see
`docs/benchmarks.md` for what each workload measures. Baselines live here, not in the product.
"""
