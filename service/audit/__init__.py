"""The append-only, hash-chained audit log: the chain's rules, its storage, its verification."""
