"""Advice on a plan: the rules (findings with reasons, sources and fixes), the layout search, the exports."""
