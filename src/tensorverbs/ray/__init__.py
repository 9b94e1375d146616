"""Ray integration: tensorverbs as a Ray Direct Transport, and tasks started as Ray actors.

Needs Ray and torch (``pip install 'tensorverbs[ray]'``).

* :func:`register_transport` registers a Ray tensor transport ("TENSORVERBS"): actor
  methods marked ``@ray.method(tensor_transport="TENSORVERBS")`` hand the torch tensors they
  return to the actors that take them through each actor's tensorverbs server.
* :func:`run_cluster` runs ``fn(server)`` in every task of a cluster whose tasks are Ray
  actors spread over the Ray cluster's nodes.
"""
from .launch import run_cluster
from .transport import TensorverbsTransport, register_transport

__all__ = ["TensorverbsTransport", "register_transport", "run_cluster"]
