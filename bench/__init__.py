"""Compozy benchmarks: `make bench` (or `python -m bench`) prints tables with ratios against raw limits.

Performance targets live here, never in timed unit tests. Benchmarks report; they only fail (non-zero exit)
when a correctness check does (a sequence gap or duplicate, lost or reordered content).
"""
