"""The deployment review gate: a table of checks over a contract's evidence, and its decisions."""
