"""Server: one task of a cluster, exchanging tensors by name with the others.

``send`` is passive: it puts the tensor in the task's local table. ``recv`` initiates the
transfer: from the local table when the source is this task, otherwise through the
protocol the server runs, "grpc" (tensors streamed over gRPC) or "grpc+verbs" (gRPC for
setup and liveness, RDMA verbs for the tensors).
"""
from __future__ import annotations

import importlib
import logging
import secrets
import threading
import weakref
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from prometheus_client import CollectorRegistry

from . import arguments as check
from . import batches
from .block_calls import BlockCalls
from .batches import SendEntry
from .cluster import ClusterSpec, TaskName, check_address, parse_task
from .errors import (AbortedError, FailedPreconditionError, InvalidArgumentError, from_code,
                     public)
from .ipc.shared_tensors import SharedTensors, device_ipc_mode
from .metrics.endpoint import MetricsEndpoint, check_port, port_from_env
from .metrics.recvs import RecvMetrics
from .metrics.stats_collector import StatsCollector
from .one_sided import OneSided
from .one_sided.calls import OneSidedCalls
from .ports import host_port, loopback
from .rendezvous.completion import SendHandle, Sends
from .rendezvous.deadlines import Deadlines
from .rendezvous.key import TaskKeys
from .rendezvous.lanes import Lanes
from .rendezvous.local import LocalTable
from .rendezvous.relay import Relays
from .rendezvous.remote import ProtocolOptions, RemoteRendezvous
from .rendezvous.sending import EntryFailed, Sending
from .resolvers.base import ClusterResolver
from .results import Results
from .rpc.auth import JobToken
from .rpc.loop import EventLoopThread
from .rpc.peers import Peers
from .rpc.service import Servicer, start_server
from .rpc.tls import TlsConfig
from .running import Running, shut_down_dropped
from .runtime import TaskRuntime, host_of
from .stats import Counters
from .tensor import numeric_dtype
from .torch_interop import as_torch, is_torch_dtype, numpy_dtype_of
from .verbs.config import RdmaConfig

log = logging.getLogger(__name__)

#: protocol name -> "module:class" of its RemoteRendezvous
PROTOCOLS = {
    "grpc": "tensorverbs.rpc.grpc_rendezvous:GrpcRemoteRendezvous",
    "grpc+verbs": "tensorverbs.verbs.rendezvous:VerbsRendezvous",
}

#: the warning of a task that serves anyone who reaches it
OPEN = ("%s serves anyone: it listens on %s without a job token or TLS, so any client that reaches it "
        "can take its tensors, set up verbs channels to it, reach its registered buffers and free the "
        "tensors it passes by handle; give the job a token (TENSORVERBS_TOKEN or TENSORVERBS_TOKEN_FILE, "
        "or token=) and TLS (the TENSORVERBS_TLS_* variables, or tls=) to close it")

#: counters every server reports, whatever its protocol
COUNTERS = ("sends", "local_recvs", "tensors_sent", "bytes_sent", "tensors_received",
            "bytes_received", "proxy_copies", "ipc_sent", "ipc_received", "remote_reads",
            "remote_writes", "remote_bytes_read", "remote_bytes_written", "publication_reads",
            "publication_rereads", "recv_calls_broken")


class Server(BlockCalls, OneSidedCalls):
    """A task of ``cluster`` running ``protocol``; also a context manager that stops it.

    Every method raises TensorverbsError only; an argument of a wrong type or value is
    InvalidArgumentError (a timeout is None, no limit, or 0 to 1e9 seconds). A call with
    arguments its signature does not take (a missing ``to``, an unknown keyword) raises
    Python's TypeError.

    Args:
        cluster: a ClusterSpec or the dict it is made from (the server keeps a copy, which
            :meth:`add_task` grows).
        job_name, task_index: which task this is.
        protocol: "grpc" or "grpc+verbs".
        config: verbs configuration (default: from the RDMA_* environment variables).
        startup_grace: how long a recv waits for a peer that has not come up yet before
            raising UnavailableError (seconds, 0 or more).
        bind_address: where the gRPC server listens, ``host:port`` (default: this task's
            address). A port another process listens on is UnavailableError saying the
            address is already in use.
        token: the job token every call between the job's tasks carries; calls without
            it are refused (default: TENSORVERBS_TOKEN or TENSORVERBS_TOKEN_FILE; none
            leaves the service open).
        tls: the task's certificate, key and job CA for TLS on the control plane
            (default: from the TENSORVERBS_TLS_* variables; none is plaintext).
        metrics_port: serve Prometheus metrics at ``http://<host>:<port>/metrics`` on the
            host the gRPC server binds, 0 picking a free port (default:
            TENSORVERBS_METRICS_PORT; none serves no metrics); see :attr:`metrics_address`.
        spare_tasks: with "grpc+verbs", how many tasks may join at run time
            (:meth:`add_task`); "grpc" has no limit.
        device_ipc: pass tensors to tasks of this host that see their device by handle
            (CUDA IPC) instead of through host proxies: None (default:
            TENSORVERBS_DEVICE_IPC, else auto) shares CUDA tensors, True also the
            ``cpu:proxy`` stand-in's, False nothing.
        tensor_type: what recvs return and :meth:`allocate` makes: "numpy" arrays (the
            default) or "torch" tensors (sharing the received memory; needs torch); a recv
            may ask for the other.
    """

    @public
    def __init__(self, cluster: ClusterSpec | Mapping[str, Any], job_name: str, task_index: int,
                 protocol: str = "grpc", *, config: RdmaConfig | None = None,
                 startup_grace: float = 60.0, bind_address: str | None = None,
                 token: str | None = None, tls: TlsConfig | None = None,
                 metrics_port: int | None = None, spare_tasks: int = 0,
                 device_ipc: bool | None = None, tensor_type: str = "numpy") -> None:
        self.cluster = ClusterSpec(cluster)
        self._task = self.cluster.resolve(
            TaskName(check.text(job_name, "job_name"), check.integer(task_index, "task_index")))
        if check.text(protocol, "protocol") not in PROTOCOLS:
            raise InvalidArgumentError(
                f"unknown protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        self.protocol = protocol
        Results(check.text(tensor_type, "tensor_type"))  # a known type (and torch there for "torch")
        self.tensor_type = tensor_type
        spare_tasks = check.integer(spare_tasks, "spare_tasks", 0)
        startup_grace = check.seconds(startup_grace, "startup_grace")
        bind_address = None if bind_address is None else check_address(bind_address, "bind_address")
        config = check.optional_instance(config, RdmaConfig, "config")
        metrics_port = port_from_env() if metrics_port is None else check_port(metrics_port, "metrics_port")
        device_ipc = device_ipc_mode(check.optional_flag(device_ipc, "device_ipc"))
        job_token = JobToken.resolve(check.optional_text(token, "token"))
        tls = check.optional_instance(tls, TlsConfig, "tls") or TlsConfig.from_env()
        rdma_config = config or RdmaConfig.from_env()
        bind = bind_address or self.cluster.address(self._task)
        peers = Peers(self.cluster, startup_grace, token=job_token, tls=tls, caller=str(self._task))
        # every argument and setting is checked: from here on, what starts is stopped by
        # Running.shutdown, on a failure below, stop(), or the finalizer of a dropped server
        self.incarnation = secrets.randbits(64) or 1
        self._keys = TaskKeys(self.cluster, self._task, self.incarnation)
        self._stopped = threading.Event()
        self._sends = Sends(str(self._task))
        self._running = running = Running(self._stopped, self._sends)
        self._finalizer = weakref.finalize(self, shut_down_dropped, running)
        self._finalizer.atexit = False
        name = f"tensorverbs-{self._task.job}-{self._task.task}"
        try:
            counters = Counters(*COUNTERS)
            self._metrics = CollectorRegistry()
            self._metrics.register(StatsCollector(counters.snapshot, self.task, protocol))
            running.loop, running.deadlines, running.lanes = EventLoopThread(name), Deadlines(), Lanes(name)
            shared = SharedTensors(self.cluster, self._task, self.incarnation, counters, running.loop,
                                   peers, device_ipc, job_token)
            self._rt = running.rt = TaskRuntime(
                cluster=self.cluster, task=self._task, incarnation=self.incarnation,
                protocol=protocol, table=LocalTable(), counters=counters, loop=running.loop,
                deadlines=running.deadlines, peers=peers,
                recvs=RecvMetrics(self._metrics, self.task, protocol), lanes=running.lanes, shared=shared)
            counters.gauge("ipc_exports", shared.exports)
            module, cls = PROTOCOLS[protocol].split(":")
            options = ProtocolOptions(rdma_config, spare_tasks, bind_address)
            self._rendezvous: RemoteRendezvous = getattr(importlib.import_module(module), cls)(self._rt, options)
            running.rendezvous = self._rendezvous
            self._sending = Sending(self._keys, self._sends, self._rt, self._rendezvous)
            self._rt.relays = Relays(self._task, self.incarnation, running.loop, peers, running.lanes, self._sends,
                                     self._rendezvous)
            counters.gauge("table_steps", self._rendezvous.table_steps)
            self._one_sided = running.one_sided = OneSided(
                self._rt, rdma_config, host_of(bind_address) if bind_address else "")
            # everything a peer's first call needs is in place before the port opens
            self._rendezvous.start()
            servicer = Servicer(self._rt, self._rendezvous.setup_handler(), self._one_sided.accept,
                                self._sends.held, self._one_sided.hold)
            running.grpc, port = self._rt.loop.submit(start_server(servicer, bind, job_token, tls)).result()
            self._tell_port(port)
            self._rt.shared.start()  # the address is this task's now
            if metrics_port is not None:
                host = bind.rsplit(":", 1)[0].strip("[]")
                running.metrics_endpoint = MetricsEndpoint(self._metrics, host, metrics_port)
        except BaseException:
            self._finalizer.detach()
            running.shutdown()
            raise
        log.info("%s serving %s on %s%s%s", self._task, protocol, bind_address or self.target,
                 " over TLS" if tls else "", " with a job token" if job_token else "")
        if job_token is None and tls is None and not loopback(host_of(bind)):
            log.warning(OPEN, self._task, host_port(host_of(bind), port))

    @classmethod
    @public
    def from_resolver(cls, resolver: ClusterResolver, protocol: str = "grpc", **kwargs: Any) -> "Server":
        """Start the task ``resolver`` says this process is, in its cluster (a resolver of
        :mod:`tensorverbs.resolvers`: TF_CONFIG, Slurm, torchrun), with the resolver's
        token unless ``kwargs`` give one; ``kwargs`` as for the constructor."""
        if not isinstance(resolver, ClusterResolver):
            raise InvalidArgumentError(f"resolver must be a ClusterResolver, not {type(resolver).__name__}")
        kwargs.setdefault("token", resolver.token)
        return cls(resolver.cluster_spec(), resolver.task_type, resolver.task_id, protocol, **kwargs)

    @public
    def add_task(self, job_name: str, task_index: int, address: str, *, replace: bool = False) -> None:
        """Learn a task that joined the cluster at run time, at ``address`` (``host:port``):
        from now on this server sends to it and receives from it like any other task.
        Nothing happens if it is known at that address already; InvalidArgumentError if at
        another, unless ``replace``: the task moved there (it restarted elsewhere), and its
        channels are set up afresh. Each task learns the others it exchanges tensors with,
        in any order. With "grpc+verbs", ResourceExhaustedError past ``spare_tasks`` joined
        tasks alive at once (a joined task whose channel failed is forgotten, its room
        freed)."""
        self._check_running()
        task = TaskName(check.text(job_name, "job_name"), check.integer(task_index, "task_index", 0))
        self._rendezvous.add_task(task, check.text(address, "address"), check.flag(replace, "replace"))
        log.info("%s learned %s at %s", self._task, task, address)

    @public
    def knows(self, task: str) -> bool:
        """Whether this server knows where ``task`` is: it is in the cluster and, with
        "grpc+verbs", its channel did not fail nor come back as another incarnation of
        the task (it may have restarted elsewhere: ``add_task(..., replace=True)`` tells
        where) since it was learned."""
        return self._rendezvous.knows(parse_task(check.text(task, "task")))

    @property
    def task(self) -> str:
        """This task's name, long form: ``/job:worker/replica:0/task:0``."""
        return str(self._task)

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of this task's Prometheus ``/metrics`` endpoint; None when it
        serves no metrics."""
        endpoint = self._running.metrics_endpoint
        return endpoint.address if endpoint is not None else None

    @property
    def target(self) -> str:
        """``grpc://host:port``: where the other tasks reach this one (the port it got
        when its address in the cluster has port 0)."""
        return "grpc://" + self.cluster.address(self._task)

    def _tell_port(self, port: int) -> None:
        """The server listens on ``port``: if this task's address has port 0, it is this
        port from now on."""
        host, asked = self.cluster.address(self._task).rsplit(":", 1)
        if int(asked) == 0:
            self.cluster.add_task(self._task.job, self._task.task, f"{host}:{port}", replace=True)

    def _check_running(self) -> None:
        if self._stopped.is_set():
            raise FailedPreconditionError(f"server of {self._task} is stopped")

    @public
    def send(self, name: str, value: Any, to: str | Sequence[str], step_id: int = 0,
             is_dead: bool = False, *, relay: bool | int = False, late: bool = False) -> SendHandle:
        """Offer ``value`` as tensor ``name`` for task ``to`` at ``step_id``; ``to`` a list
        of tasks: for each of them (a broadcast), the tensor's bytes registered once for all.

        ``relay`` (a broadcast of a host tensor): each receiver passes the tensor on to the
        next, in the order of ``to`` (True: a chain; a number k: a tree of k children per
        receiver, at most 16), so this task's link carries its bytes once whatever the
        number of receivers (a tensor of 8 MiB or more in parts, each passed on as it
        lands); receivers recv it as any tensor. A receiver whose parent in the relay is
        gone gets it from this task. Each receiver passes on the tensor its
        recv returned: it must not modify it until its children have it (``flush``).

        ``late`` (with ``relay``): a task not in ``to`` that recvs the tensor later (a late
        joiner) gets it from a receiver that has it, this task's link idle (from this task
        while none has it). Each receiver then keeps what its recv returned for them, and
        this task the tensor it sent, unchanged, until they clean the step up
        (``cleanup_step``); late receivers served by a receiver get copies, and serve no
        other. The latest late relay of each name is served so: a later one of the name
        ends it, as does a relayed recv into the same memory a receiver's (and a later late
        relay of the same memory this task's, once its receivers have it). Late receivers
        that nobody can serve get NotFoundError. A tensor of strings is sent as without
        ``relay`` (``late`` refused).

        ``value`` is a numpy array (or anything ``numpy.asarray`` takes: a list or tuple
        of numbers, or of strings, nested as numpy takes it, is one tensor), a torch tensor
        or any tensor speaking DLPack (``__dlpack__``), or an array of the ``cpu:proxy``
        stand-in device. A list of tensors is InvalidArgumentError: send them under one
        name as a :class:`tensorverbs.TensorList`. Passive: the tensor waits in the
        local table until ``to`` receives it. A non-contiguous array is made contiguous and
        a tensor on a device the transport cannot reach is copied to host memory here;
        otherwise the array itself is sent, so the caller must not modify it until it
        has been received.

        Returns a :class:`SendHandle` that completes when ``to`` has the tensor (every task
        of ``to``; it fails with AbortedError if the step is aborted or cleaned up first);
        :meth:`flush` waits for all of them.
        """
        self._check_running()
        if relay is not False:
            return self._sending.relay(name, value, to, step_id, is_dead, relay, late)
        if late is not False:
            raise InvalidArgumentError("late receivers are served by a relay: send(..., relay=True, late=True)")
        return self._sending.send(name, value, to, step_id, is_dead)

    @public
    def flush(self, timeout: float | None = None) -> None:
        """Wait until the receiver of every tensor this task has sent has it (or the send
        failed: its :class:`SendHandle` tells); DeadlineExceededError naming the sends
        still waiting if ``timeout`` seconds pass first. Call it before a process that
        sent tensors exits, or they are lost with it."""
        self._sends.flush(check.optional_seconds(timeout, "timeout"))

    @public
    def send_many(self, entries: Iterable[SendEntry | tuple[Any, ...]]) -> list[SendHandle]:
        """Send many tensors in one call: each entry a :class:`tensorverbs.SendEntry`
        (name, value, to, step_id) or a tuple of them; their handles in entry order (see
        :meth:`send`). An entry that cannot be sent raises its error naming it; the entries
        before it were sent."""
        self._check_running()
        batch = batches.entries(entries, SendEntry)
        try:
            return self._sending.send_many(batch)
        except EntryFailed as failed:
            entry, exc = batch[failed.index], failed.error
            raise from_code(int(exc.code), f"entry {failed.index} ({entry.name!r} to {entry.to}): {exc.message}") from None

    @public
    def allocate(self, shape: tuple[int, ...] | int, dtype: Any = np.float32, *,
                 one_sided: bool = False) -> Any:
        """An uninitialised array in the memory this server's protocol sends from directly:
        with "grpc+verbs", registered memory (like TensorFlow's allocator visitor), so a
        tensor filled in place and sent needs no registration or copy; with "grpc", an
        ordinary array. It returns to the pool when the last view of it is dropped.
        ``one_sided``: memory for :meth:`register` instead, registered once for one-sided
        access, which peers on this host then reach by shared memory (at the speed of a
        memcpy; other memory is reached through the soft provider's stream).
        ``dtype`` is a numpy dtype or a torch dtype; a torch one, or a server whose
        ``tensor_type`` is "torch", makes a torch tensor over that memory."""
        self._check_running()
        torch = is_torch_dtype(dtype) or self.tensor_type == "torch"
        if is_torch_dtype(dtype):
            np_dtype = numpy_dtype_of(dtype)
            if np_dtype is None:
                raise InvalidArgumentError(f"dtype {dtype} is not one tensorverbs moves")
        else:
            np_dtype = numeric_dtype(dtype)
        shape = check.shape(shape)
        if check.flag(one_sided, "one_sided"):
            array = self._one_sided.allocate(shape, np_dtype)
        else:
            array = self._rendezvous.allocate(shape, np_dtype)
        return as_torch(array) if torch else array

    @public
    def abort_step(self, step_id: int, reason: str = "") -> None:
        """Make every pending and later send/recv of ``step_id`` raise AbortedError."""
        step_id = check.integer(step_id, "step_id")
        reason = check.text(reason, "reason")
        message = f"step {step_id} was aborted" + (f": {reason}" if reason else "")
        self._rt.relays.drop_step(step_id, message)  # (first: no late receiver is served at it meanwhile)
        self._rendezvous.abort_step(step_id, AbortedError(message))
        self._rt.shared.drop_step(step_id)

    @public
    def cleanup_step(self, step_id: int) -> None:
        """Forget ``step_id``'s tensors and state (including an abort)."""
        step_id = check.integer(step_id, "step_id")
        self._rt.relays.drop_step(step_id)  # (first: no late receiver is served at it meanwhile)
        self._rendezvous.cleanup_step(step_id)
        self._rt.shared.drop_step(step_id)

    @public
    def pending(self) -> tuple[int, int]:
        """(tensors sent and waiting for their recv, recvs of this task's tensors waiting for
        their send) in the local table."""
        return self._rendezvous.pending()

    @public
    def stats(self) -> dict[str, int]:
        """Counters: sends, local_recvs, tensors_sent, bytes_sent, tensors_received,
        bytes_received, and the protocol's own."""
        return self._rt.counters.snapshot()

    @public
    def join(self, timeout: float | None = None) -> bool:
        """Wait until the server is stopped; False if ``timeout`` passed first."""
        return self._stopped.wait(check.optional_seconds(timeout, "timeout"))

    @public
    def stop(self) -> None:
        """Fail pending recvs, close channels and stop serving. Idempotent. A server
        dropped without it is stopped when it is garbage-collected. Before the channels
        close, their last acknowledgements leave (at most 0.5 s): the senders of the
        tensors received learn that this task has them. Sends that no receiver took are
        dropped (their handles fail with CancelledError) and a warning names them: call
        :meth:`flush` first to wait for their receivers."""
        self._finalizer.detach()
        self._running.shutdown()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Server({self.task}, protocol={self.protocol!r}, target={self.target!r})"
