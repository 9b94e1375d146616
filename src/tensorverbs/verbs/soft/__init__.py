"""The software verbs provider ("soft"): RDMA reliable-connected semantics without RDMA
hardware.

Memory. ``alloc_mr`` memory is a memfd mapped pre-faulted; ``reg_mr`` registers a
caller's buffer. Each context publishes its registrations in a key table (itself a
memfd) with random, unguessable rkeys.

Data path. Between processes of one host (same boot id, network and pid namespaces,
or ``TENSORVERBS_SAME_HOST``), a one-sided write or read to ``alloc_mr`` memory is done
by the requester itself: it maps the target's key table and segments once (through
``/proc/<pid>/fd``), validates the access against the key table, and copies with
``memmove`` (large copies split across a few threads); only the immediate of a write-with-immediate crosses the Unix socket between
the queue pairs, after the data. Everything else -- sends, accesses to ``reg_mr``
memory, and all traffic between hosts -- is framed on a stream (Unix socket or TCP):
the receiver reads each payload straight into the target memory, and the requester's
completion comes with the target's acknowledgement, so remote errors are reported.
Acknowledgements ride on frames going back; a bare one is sent only when the
acknowledging side is about to sleep.

Progress (manual, like libfabric's ``FI_PROGRESS_MANUAL``). A context's sockets are
driven by whichever thread polls or waits on one of its completion queues: ``wait``
sleeps in ``epoll`` on the sockets (and a wake eventfd) and handles what is ready, one
driving thread at a time; other waiters sleep until the driver delivers to their queue
or hands over. ``post_send`` copies same-host one-sided data inline and pushes frames
without blocking; what the socket does not take now is pushed by the driver. So a
context needs some thread waiting on (or polling) one of its completion queues -- the
protocol's completion thread -- for incoming stream traffic to land, for large sends to
drain and for acknowledgements to leave; no extra thread sits on the data path.

Threads. ``post_send``, ``post_recv``, ``poll``, ``wait`` and ``wake`` are safe from
any thread; connection dials are accepted by one thread per context, off the data path.
"""
from .provider import SoftProvider

__all__ = ["SoftProvider"]
