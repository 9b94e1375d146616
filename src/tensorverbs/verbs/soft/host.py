"""Same-host identity: two processes share memory only if they see the same kernel
(boot id), the same network namespace (the Unix-socket doorbells use abstract names) and
the same pid namespace (segments are opened through ``/proc/<pid>/fd``)."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _ns_inode(name: str) -> int:
    try:
        return os.stat(f"/proc/self/ns/{name}").st_ino
    except OSError:
        return 0


@dataclass(frozen=True)
class HostIdentity:
    """What decides whether two processes are on one host."""

    boot_id: str
    net_ns: int
    pid_ns: int

    @classmethod
    def current(cls) -> "HostIdentity":
        return cls(_read("/proc/sys/kernel/random/boot_id"), _ns_inode("net"), _ns_inode("pid"))

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "HostIdentity":
        return cls(str(data["boot_id"]), int(data["net_ns"]), int(data["pid_ns"]))

    @property
    def known(self) -> bool:
        return bool(self.boot_id) and bool(self.net_ns) and bool(self.pid_ns)


def same_host(mine: HostIdentity, policy: str, theirs: HostIdentity, their_policy: str) -> bool:
    """Both sides reach the same answer: "no" on either side wins, then "yes" on either,
    then the identities must match ("auto")."""
    if "no" in (policy, their_policy):
        return False
    if "yes" in (policy, their_policy):
        return True
    return mine.known and mine == theirs
