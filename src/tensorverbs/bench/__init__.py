"""Benchmarks: the transfer sweep, the distributed AlexNet parameter server, provider bandwidth."""
