"""Where a task started on a Ray node listens: the node's address and a free port."""
from __future__ import annotations

import ray

from ..ports import free_port, host_port


def listen_address() -> str:
    """``host:port`` on this process's Ray node, the port free when chosen (a process that
    takes it before the server starts makes the server fail to start)."""
    host = ray.util.get_node_ip_address()
    return host_port(host, free_port(host))
