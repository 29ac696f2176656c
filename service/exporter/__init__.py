"""Prometheus export: database-derived gauges, in-process counters, the /metrics endpoint."""
