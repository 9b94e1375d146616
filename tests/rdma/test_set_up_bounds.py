"""Channel set-ups a peer asks for whose queue pair must be dialed at an address that never
answers (each holds its dial for seconds) hold up only the set-ups of the task they claim
to come from."""
from __future__ import annotations

import time

import grpc
import numpy as np

import tensorverbs as tv
from black_hole import aimed_at, black_hole, dialing  # noqa: F401 (black_hole: a fixture)
from rogue import RoguePeer
from tensorverbs.cluster import parse_task
from tensorverbs.local_cluster import cluster_spec, pattern, same
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.rpc.options import method
from tensorverbs.verbs.config import RdmaConfig

CONFIG = RdmaConfig.from_env({"TENSORVERBS_PROVIDER": "soft"})


def test_channel_set_ups_that_hang_hold_up_only_the_task_they_claim_to_come_from(black_hole):
    """40 set-ups claiming task 2 whose endpoints are dialed into a black hole: task 1's
    channel to the same task is set up, and its tensor received, while they all still wait."""
    spec = cluster_spec({"worker": 3})
    rogue = RoguePeer(parse_task("/job:worker/replica:0/task:2"), spec["worker"][2])
    rogue.mangle_endpoint = lambda endpoint: aimed_at(endpoint, black_hole)
    with tv.Server(spec, "worker", 0, "grpc+verbs", config=CONFIG) as owner, \
            tv.Server(spec, "worker", 1, "grpc+verbs", config=CONFIG) as receiver, \
            grpc.insecure_channel(spec["worker"][0]) as channel:
        call = channel.unary_unary(method("GetRemoteAddress"),
                                   request_serializer=pb.GetRemoteAddressRequest.SerializeToString,
                                   response_deserializer=pb.GetRemoteAddressResponse.FromString)
        hanging = []
        for _ in range(40):  # more than any default thread pool has threads
            rogue._new_qp()
            hanging.append(call.future(pb.GetRemoteAddressRequest(**rogue._describe()), timeout=120))
        try:
            deadline = time.monotonic() + 60
            while not dialing(black_hole) and time.monotonic() < deadline:
                time.sleep(0.01)  # (nothing tells when the owner dials)
            assert dialing(black_hole), "the owner never dialed the address given"
            owner.send("x", pattern(4096, 3), to=receiver.task, step_id=1)
            assert same(receiver.recv("x", owner.task, 1, timeout=120), pattern(4096, 3))
            waiting = sum(not future.done() for future in hanging)
            assert waiting == len(hanging), f"{len(hanging) - waiting} hanging set-ups ended before the recv"
        finally:
            for future in hanging:
                future.cancel()
            rogue.close()
