"""Connected queue pairs for the provider conformance suite, usable in a test process
and in a spawned peer process alike (no pytest here).

Flavors: "soft-shm" (soft provider, one host), "soft-tcp" (soft provider forced onto
TCP), "ibverbs" (the first two devices with an active port).
"""
from __future__ import annotations

import os
import queue
import threading
import time

from tensorverbs.verbs import Access, MemoryRegion, RdmaConfig, WorkCompletion, get_provider
from tensorverbs.verbs.api import Provider

FLAVORS = ("soft-shm", "soft-tcp", "ibverbs")
#: transfer-size cap for hardware flavors (an emulated device moves tens of MB/s)
IBVERBS_MAX_BYTES = int(os.environ.get("TENSORVERBS_TEST_MAX_BYTES", str(4 << 20)))


def unavailable(flavor: str) -> str | None:
    """Why ``flavor`` cannot run here, or None."""
    if not flavor.startswith("ibverbs"):
        return None
    try:
        ok, reason = get_provider("ibverbs").availability()
    except ImportError as exc:
        return f"ibverbs provider cannot be imported: {exc}"
    return None if ok else f"ibverbs provider unavailable: {reason}"


def configs(flavor: str) -> tuple[Provider, RdmaConfig, RdmaConfig]:
    """The provider and the configurations of side A and side B."""
    if flavor == "soft-shm":
        return get_provider("soft"), RdmaConfig(provider="soft"), RdmaConfig(provider="soft")
    if flavor == "soft-tcp":
        cfg = RdmaConfig(provider="soft", same_host="no")
        return get_provider("soft"), cfg, cfg
    provider = get_provider("ibverbs")
    names = [d.name for d in provider.devices() if any(p.state == "ACTIVE" for p in d.ports)]
    a, b = names[0], names[1 if len(names) > 1 else 0]
    return (provider, RdmaConfig(provider="ibverbs", device=a),
            RdmaConfig(provider="ibverbs", device=b))


class Side:
    """Context, PD, one CQ for both queues, QP, and a thread collecting completions
    (the provider-neutral stand-in for the protocol's completion thread)."""

    def __init__(self, provider: Provider, config: RdmaConfig, send_depth: int = 64,
                 recv_depth: int = 64) -> None:
        self.ctx = provider.open(config)
        self.pd = self.ctx.alloc_pd()
        self.cq = self.ctx.create_cq(2 * (send_depth + recv_depth))
        self.qp = self.ctx.create_qp(self.pd, self.cq, self.cq, send_depth, recv_depth)
        self._wcs: queue.Queue[WorkCompletion] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        while not self._stop.is_set():
            for wc in self.cq.wait(timeout=0.1):
                self._wcs.put(wc)

    def completions(self, n: int, timeout: float = 20.0) -> list[WorkCompletion]:
        """The next ``n`` completions; AssertionError if they do not come in time."""
        out: list[WorkCompletion] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            try:
                out.append(self._wcs.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(
                    f"only {len(out)} of {n} completions within {timeout} s: {out}") from None
        return out

    def region(self, nbytes: int, access: Access = Access.all()) -> MemoryRegion:
        return self.pd.alloc_mr(nbytes, access)

    def close(self) -> None:
        self._stop.set()
        self.cq.wake()
        self._thread.join(timeout=5)
        self.ctx.close()


def open_pair(flavor: str, send_depth: int = 64, recv_depth: int = 64) -> tuple[Side, Side]:
    provider, cfg_a, cfg_b = configs(flavor)
    a = Side(provider, cfg_a, send_depth, recv_depth)
    try:
        b = Side(provider, cfg_b, send_depth, recv_depth)
    except BaseException:
        a.close()
        raise
    a.qp.connect(b.qp.endpoint())
    b.qp.connect(a.qp.endpoint())
    return a, b


def serve_peer(flavor: str, conn) -> None:
    """Side B in a process of its own (spawned by a test): exchange endpoints over
    ``conn``, report the first write-with-immediate into its region, then idle until
    killed."""
    import hashlib

    from tensorverbs.verbs import QPEndpoint, RecvWR

    provider, _, cfg_b = configs(flavor)
    side = Side(provider, cfg_b)
    mr = side.region(1 << 20)
    conn.send((side.qp.endpoint().to_bytes(), mr.addr, mr.rkey))
    side.qp.connect(QPEndpoint.from_bytes(conn.recv()))
    side.qp.post_recv(RecvWR(1))
    conn.send("ready")
    [wc] = side.completions(1)
    conn.send((int(wc.status), wc.imm_data, wc.byte_len, hashlib.sha256(mr.buf).hexdigest()))
    try:
        conn.recv()  # until killed, or until the test closes the pipe
    except EOFError:
        pass
    side.close()


class Waiting:
    """A thread in ``cq.wait(timeout=None)``: started, and known to have reached the call
    (it may not be blocked yet; the tests hold either way). ``result`` joins it."""

    def __init__(self, cq) -> None:
        self._got: list | None = None
        entered = threading.Event()

        def run() -> None:
            entered.set()
            self._got = cq.wait(timeout=None)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not entered.wait(10):
            raise TimeoutError("the waiting thread did not start")

    def result(self, timeout: float = 30.0) -> list[WorkCompletion]:
        """What ``wait`` returned; TimeoutError if it is still waiting after ``timeout``."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"wait() did not return within {timeout} s")
        return self._got
