"""Megatron-Bridge offline packing, simulated exactly: its config, the algorithms, metrics, baselines, a cache."""
