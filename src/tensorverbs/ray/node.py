"""Where a task started on a Ray node listens: the node's address and a free port."""
from __future__ import annotations

import ray

from ..local_cluster import free_port


def listen_address() -> str:
    """``host:port`` on this process's Ray node, the port free when chosen (a process that
    takes it before the server starts makes the server fail to start)."""
    host = ray.util.get_node_ip_address()
    port = free_port(host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
