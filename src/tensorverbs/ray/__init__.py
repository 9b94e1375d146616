"""Ray integration: tensorverbs as a Ray Direct Transport, and tasks started as Ray actors.

Needs Ray and torch (``pip install 'tensorverbs[ray]'``).

* :func:`register_transport` registers a Ray tensor transport ("TENSORVERBS"): actor
  methods marked ``@ray.method(tensor_transport="TENSORVERBS")`` hand the torch tensors they
  return to the actors that take them through each actor's tensorverbs server; with
  ``one_sided=True`` the tensors are registered and read (RemoteBuffer), so the driver's
  ``ray.get`` takes them too.
* :func:`run_cluster` runs ``fn(server)`` in every task of a cluster whose tasks are Ray
  actors spread over the Ray cluster's nodes.
"""
from .launch import run_cluster
from .read_transport import TensorverbsReadTransport
from .registry import register_transport
from .transport import TensorverbsTransport

__all__ = ["TensorverbsReadTransport", "TensorverbsTransport", "register_transport", "run_cluster"]
