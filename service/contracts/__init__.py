"""Contracts: the fitted, immutable promise, its validation, hashing, storage and use cases."""
