"""Workloads: arrival processes, prompts and lengths, traces. Pure (no network)."""
