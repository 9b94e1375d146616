"""Registering tensorverbs' Ray tensor transports: two-sided (:mod:`.transport`: the
source sends, the destination receives) or one-sided (:mod:`.read_transport`: the source
registers, any process reads, the driver included)."""
from __future__ import annotations

from typing import Any

import torch
from ray.experimental import register_tensor_transport

from .. import arguments as check
from ..errors import InvalidArgumentError
from ..server import PROTOCOLS
from .read_transport import TensorverbsReadTransport
from .transport import TensorverbsTransport

#: the transports registered in this process: name -> settings
_registered: dict[str, dict[str, Any]] = {}


def register_transport(name: str = "TENSORVERBS", protocol: str = "grpc+verbs", *,
                       one_sided: bool = False, spare_tasks: int = 64, timeout: float = 60.0,
                       token: str | None = None) -> str:
    """Register a Ray tensor transport called ``name`` that moves CPU torch tensors
    between actors through tensorverbs ``protocol``; returns the name as Ray keeps it
    (upper case). Call it in the driver before creating the actors, which need
    ``@ray.remote(enable_tensor_transport=True)``; then
    ``@ray.method(tensor_transport=name)`` on a method sends what it returns that way.
    An actor that Ray may restart calls it in its ``__init__`` too (Ray registers a
    transport on an actor once, not in its restarted process); registering a name again
    with the same settings does nothing.

    Args:
        one_sided: the source registers the tensors (``Server.register``) and whoever
            takes them reads them (``Server.read``), without the source taking part: the
            driver can ``ray.get`` them too.
        spare_tasks: how many other actors each actor may exchange tensors with at once
            ("grpc+verbs"; see ``Server(spare_tasks=...)``).
        timeout: seconds a transfer may take before its recv (or read) fails.
        token: the job token of the actors' servers (it travels to the actors with the
            transport, through Ray); default: each actor's TENSORVERBS_TOKEN or
            TENSORVERBS_TOKEN_FILE (a ``runtime_env`` can set them). Without one, any
            client that reaches an actor's server can take its tensors.
    """
    if check.text(protocol, "protocol") not in PROTOCOLS:
        raise InvalidArgumentError(f"unknown protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    name = check.text(name, "name").upper()
    settings = {"name": name, "protocol": protocol, "spare_tasks": check.integer(spare_tasks, "spare_tasks", 0),
                "timeout": check.seconds(timeout, "timeout"), "token": check.optional_text(token, "token")}
    one_sided = check.flag(one_sided, "one_sided")
    known = _registered.get(name)
    if known is not None:
        if known != {**settings, "one_sided": one_sided}:
            shown = {key: value for key, value in known.items() if key != "token"}
            other = " and another token" if known["token"] != settings["token"] else ""
            raise InvalidArgumentError(f"transport {name} is registered already with {shown}{other}")
        return name
    base = TensorverbsReadTransport if one_sided else TensorverbsTransport
    transport = type(f"{base.__name__}_{name}", (base,), settings)
    register_tensor_transport(name, ["cpu"], transport, torch.Tensor)
    _registered[name] = {**settings, "one_sided": one_sided}
    return name
