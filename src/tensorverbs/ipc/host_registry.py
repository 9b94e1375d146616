"""HostRegistry: which tasks of this host see which devices.

A sender passes a tensor by handle only to a task of its own host that sees the tensor's
device. Each task with device IPC on writes, in a directory of the host's shared memory
(private to the user), a file named after its address listing the devices it sees; a
sender reads its destination's file. So "same host" means what CUDA IPC needs: the same
shared memory, whatever the network addresses say. A file whose process is gone is
ignored. A task that has not said yet which devices it sees (it has not used one) gets
tensors through host proxies, as before. With a job token the directory's name is derived
from the token, so that another user of the host cannot make it first (the default name is
known: whoever makes it first turns device IPC off, with a warning).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import stat
import tempfile
import threading
from typing import TYPE_CHECKING, Iterator

from ..errors import FailedPreconditionError

if TYPE_CHECKING:
    from ..rpc.auth import JobToken


def _root() -> pathlib.Path:
    shm = pathlib.Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else pathlib.Path(tempfile.gettempdir())


def _base(token: "JobToken | None" = None) -> pathlib.Path:
    """The user's registry directory (of the job of ``token``, if given)."""
    name = f"tensorverbs-ipc-{os.getuid()}"
    return _root() / (name if token is None else f"{name}-{token.derive('host registry')[:32]}")


def private_directory(path: pathlib.Path | None = None) -> pathlib.Path:
    """The user's own directory for device IPC (made on first use, mode 0700);
    FailedPreconditionError if it exists and is not a directory of this user's alone."""
    path = path or _base()
    try:
        path.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise FailedPreconditionError(f"cannot make {path} for device IPC: {exc}") from None
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise FailedPreconditionError(
            f"{path} is not a directory of this user's alone: device IPC is off")
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class HostRegistry:
    """The tasks of this host that said which devices they see."""

    def __init__(self, directory: pathlib.Path | None = None, token: "JobToken | None" = None) -> None:
        """The registry in ``directory``, by default the user's (of the job of ``token``)."""
        self.directory = private_directory(directory or _base(token))
        self._mine: dict[str, set[str]] = {}  # address -> devices, as written
        self._writing = threading.Lock()
        # address -> ((inode, mtime), pid, devices) as last read
        self._seen: dict[str, tuple[tuple[int, int], int, frozenset[str]]] = {}

    def _file(self, address: str) -> pathlib.Path:
        return self.directory / ("task-" + hashlib.sha256(address.encode()).hexdigest()[:32])

    def register(self, address: str, devices: set[str]) -> None:
        """Say that the task at ``address`` (this process) sees ``devices`` too; OSError if
        the entry cannot be written (the next call tries again)."""
        if devices <= self._mine.get(address, set()):
            return
        with self._writing, self._host_wide():
            known = self._mine.get(address, set()) | devices
            path = self._file(address)
            scratch = path.with_name(path.name + f".{os.getpid()}")
            scratch.write_text(json.dumps({"pid": os.getpid(), "devices": sorted(known)}))
            os.replace(scratch, path)
            self._mine[address] = known  # only once written: a failed write is tried again

    @contextlib.contextmanager
    def _host_wide(self) -> Iterator[None]:
        """Held while this process writes or removes entries: no other process of the host
        does meanwhile (a lock on the directory; readers need none, a write is a rename)."""
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _entry(self, address: str) -> tuple[int, frozenset[str]] | None:
        """(process id, devices) of the entry of the task at ``address``, None if it has none."""
        path = self._file(address)
        try:
            info = path.stat()
        except FileNotFoundError:
            return None
        # each write is a new file renamed over the old: its inode tells it from the one read
        # within the same tick of the clock
        stamp = (info.st_ino, info.st_mtime_ns)
        cached = self._seen.get(address)
        if cached is None or cached[0] != stamp:
            try:
                entry = json.loads(path.read_text())
                pid, devices = int(entry["pid"]), frozenset(map(str, entry["devices"]))
            except (OSError, ValueError, KeyError, TypeError):
                return None
            cached = self._seen[address] = (stamp, pid, devices)
        return cached[1], cached[2]

    def sees(self, address: str, device: str, *, elsewhere: bool = False) -> bool:
        """Whether the task at ``address`` runs on this host (``elsewhere``: in another
        process than this one) and sees ``device``."""
        entry = self._entry(address)
        if entry is None:
            return False
        pid, devices = entry
        return device in devices and not (elsewhere and pid == os.getpid()) and _alive(pid)

    def process(self, address: str) -> int | None:
        """The id of the process of the task at ``address``, None if no process alive is
        there (the task left the registry, or its process is gone)."""
        entry = self._entry(address)
        return entry[0] if entry is not None and _alive(entry[0]) else None

    def unregister(self) -> None:
        """Remove what this process registered, and nothing another process wrote since
        (the next task at an address, once this one's port was free, may have)."""
        with self._writing:
            try:
                with self._host_wide():
                    for address in self._mine:
                        entry = self._entry(address)
                        if entry is not None and entry[0] == os.getpid():
                            self._file(address).unlink(missing_ok=True)
            except FileNotFoundError:  # the directory is gone, and every entry with it
                pass
            self._mine.clear()
