"""Prometheus export: the stored readings behind the gauges, their refresher, the collectors and
the in-process instruments."""
