"""Prometheus metrics of a running Server, and the `tensorverbs top` view of a cluster."""
