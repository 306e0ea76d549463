"""Versions: a dataset over time (update, compact, rebalance), from its catalog and dataset.json."""
