"""Hygiene: duplicate keys and rules, updates, write-time deduplication (pure rules)."""
