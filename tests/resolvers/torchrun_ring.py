"""One task of a job torchrun starts (tests/resolvers/test_torchrun_resolver.py): a server
from TorchrunClusterResolver, then a ring (each task sends to the next task and receives
from the previous one) whose bytes it checks. Prints one line; exits 0 when they match."""
from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch.distributed as dist

import tensorverbs as tv
from tensorverbs.local_cluster import pattern, same
from tensorverbs.resolvers import TorchrunClusterResolver

NBYTES = 1 << 20
TIMEOUT = 60.0


def main(protocol: str) -> int:
    """Run the ring with ``protocol``; 0 if the bytes received are the bytes sent."""
    resolver = TorchrunClusterResolver(jobs={"ps": 1, "worker": 2}, timeout=TIMEOUT)
    with tv.Server.from_resolver(resolver, protocol=protocol) as server:
        tasks = [str(task) for task in server.cluster.tasks()]
        me = tasks.index(server.task)
        previous = (me - 1) % len(tasks)
        server.send("ring", pattern(NBYTES, seed=me), to=tasks[(me + 1) % len(tasks)])
        received = server.recv("ring", source=tasks[previous], timeout=TIMEOUT)
        # no server stops before every task has received its tensor
        dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
        dist.barrier()
        dist.destroy_process_group()
    matches = same(received, pattern(NBYTES, seed=previous))
    store = "agent" if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" else "rank 0"
    # one write of the whole line: the ranks share torchrun's stdout, and print() writes
    # the line and its newline apart, so two ranks' lines could run together
    os.write(1, (f"RANK={os.environ['RANK']} {server.task} at {server.cluster.address(server.task)} "
                 f"(store: {store}) received {received.nbytes} bytes from {tasks[previous]}: "
                 f"{'same' if matches else 'DIFFERENT'}\n").encode())
    return 0 if matches else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
