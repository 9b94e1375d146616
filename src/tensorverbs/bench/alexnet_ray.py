"""``tensorverbs bench alexnet --launcher ray``: the ps and the workers as Ray actors
spread over the Ray cluster's nodes (:func:`tensorverbs.ray.run_cluster`), each running
its role of :mod:`.alexnet_roles` on the server run_cluster started for it."""
from __future__ import annotations

import functools

from ..server import Server
from .alexnet_roles import PS, ParameterServer, Worker, join_steps, worker_name
from .contenders import Contender


def _role(server: Server, protocol: str, compute: bool, workers: int, batch: int, steps: int,
          shapes: list | None, verify: bool) -> list[dict]:
    """In a task: its role's records of steps 0 .. ``steps`` - 1."""
    if server.task == PS:
        role = ParameterServer(server, protocol, compute, workers, shapes, verify)
    else:
        index = int(server.task.rsplit(":", 1)[1])
        role = Worker(server, index, protocol, compute, workers, batch, shapes, verify)
    return role.run(0, steps)


def run_on_ray(contender: Contender, workers: int, compute: bool, batch: int, steps: int,
               shapes: list | None = None, verify: bool = False) -> list[dict]:
    """``steps`` training steps of a ps and ``workers`` workers running ``contender``'s
    protocol (and environment) as Ray actors; each step's joined record, as
    :func:`.alexnet_roles.join_steps` makes it. Starts or joins a Ray cluster (``ray.init()``)."""
    import ray

    from ..ray import run_cluster

    if not ray.is_initialized():
        ray.init()
    protocol = contender.options["protocol"]
    fn = functools.partial(_role, protocol=protocol, compute=compute, workers=workers, batch=batch,
                           steps=steps, shapes=shapes, verify=verify)
    results = run_cluster(fn, {"ps": 1, "worker": workers}, protocol,
                          actor_options={"runtime_env": {"env_vars": dict(contender.env)}})
    return join_steps(results[PS], [results[worker_name(i)] for i in range(workers)], verify)
