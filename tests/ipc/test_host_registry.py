"""HostRegistry: which tasks of this host see which devices; and the stand-in's handles,
which name files of the registry's directory and nothing else."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.devices import STAND_IN
from tensorverbs.ipc.descriptor import STAND_IN as KIND, SharedTensorDescriptor
from tensorverbs.ipc import host_registry
from tensorverbs.ipc.host_registry import HostRegistry, private_directory
from tensorverbs.ipc.stand_in_ipc import StandInIpc
from tensorverbs.ipc.shared_tensors import device_ipc_mode
from tensorverbs.rpc.auth import JobToken


@pytest.fixture
def registry(tmp_path):
    reg = HostRegistry(tmp_path / "ipc")
    yield reg
    reg.unregister()


def test_a_task_sees_what_it_registered(registry):
    assert not registry.sees("127.0.0.1:1000", "GPU-a")
    registry.register("127.0.0.1:1000", {"GPU-a"})
    registry.register("127.0.0.1:1000", {"GPU-b"})
    assert registry.sees("127.0.0.1:1000", "GPU-a") and registry.sees("127.0.0.1:1000", "GPU-b")
    assert not registry.sees("127.0.0.1:1000", "GPU-c") and not registry.sees("127.0.0.1:1001", "GPU-a")
    other = HostRegistry(registry.directory)  # another process of the host reads the same
    assert other.sees("127.0.0.1:1000", "GPU-a")
    registry.unregister()
    assert not other.sees("127.0.0.1:1000", "GPU-a")


def test_a_task_of_this_process_is_told_apart_from_one_of_another(registry):
    registry.register("127.0.0.1:1000", {"GPU-a"})
    assert registry.sees("127.0.0.1:1000", "GPU-a")
    assert not registry.sees("127.0.0.1:1000", "GPU-a", elsewhere=True)  # this process
    assert not registry.sees("127.0.0.1:1001", "GPU-a", elsewhere=True)  # not registered
    # another process registers, and lives until its stdin closes
    child = subprocess.Popen(
        [sys.executable, "-c", "import pathlib, sys; from tensorverbs.ipc.host_registry import HostRegistry; "
         "HostRegistry(pathlib.Path(sys.argv[1])).register('127.0.0.1:1002', {'GPU-a'}); "
         "print('in', flush=True); sys.stdin.read()", str(registry.directory)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "in\n"
        assert registry.sees("127.0.0.1:1002", "GPU-a", elsewhere=True)
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def test_a_task_that_left_does_not_remove_the_entry_of_the_next_task_at_its_address(registry):
    """A task's port is free once its server stopped, before its process left the registry:
    the next task at that address (a process of its own) may have registered by then, and
    the first one's leaving must not take the new entry with it."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import pathlib, sys; from tensorverbs.ipc.host_registry import HostRegistry; "
         "r = HostRegistry(pathlib.Path(sys.argv[1])); r.register('127.0.0.1:1003', {'GPU-a'}); "
         "print('in', flush=True); sys.stdin.readline(); r.unregister(); print('out', flush=True)",
         str(registry.directory)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "in\n"
        registry.register("127.0.0.1:1003", {"GPU-a"})  # the next task at the address
        child.stdin.write("leave\n")
        child.stdin.flush()
        assert child.stdout.readline() == "out\n"
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    reader = HostRegistry(registry.directory)
    assert reader.process("127.0.0.1:1003") == os.getpid() and reader.sees("127.0.0.1:1003", "GPU-a")


def test_the_file_of_a_dead_process_is_ignored(registry):
    registry.register("127.0.0.1:1000", {"GPU-a"})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    path = registry._file("127.0.0.1:1000")
    path.write_text(json.dumps({"pid": int(dead.stdout), "devices": ["GPU-a"]}))
    os.utime(path, ns=(1, 1))  # a new mtime: read again
    assert not HostRegistry(registry.directory).sees("127.0.0.1:1000", "GPU-a")


@pytest.mark.parametrize("content", ["", "{", "[]", '{"pid": "x", "devices": []}', '{"devices": []}'])
def test_a_malformed_file_is_ignored(registry, content):
    registry._file("127.0.0.1:1000").write_text(content)
    assert not registry.sees("127.0.0.1:1000", "GPU-a")


def test_a_directory_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "open"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(tv.FailedPreconditionError, match="not a directory of this user's alone"):
        private_directory(shared)
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(tv.FailedPreconditionError):
        private_directory(link)


@pytest.mark.parametrize("blob", [b"../../etc/passwd", b"tensor-" + b"0" * 31, b"/tmp/x", b"tensor-" + b"g" * 32])
def test_a_stand_in_handle_names_only_its_own_files(tmp_path, blob):
    ipc = StandInIpc(tmp_path)
    descriptor = SharedTensorDescriptor(KIND, 1, (4,), 1, 1, "cpu:proxy", (blob,))
    with pytest.raises(tv.DataLossError, match="valid file name"):
        ipc.open(descriptor)


def test_a_stand_in_export_is_read_back_and_checked(tmp_path):
    ipc = StandInIpc(tmp_path)
    array = np.arange(12, dtype=np.int32).reshape(3, 4)
    export = ipc.export(STAND_IN.from_host(array), STAND_IN)
    descriptor = SharedTensorDescriptor(KIND, export.dtype, export.shape, 1, 1, "cpu:proxy", export.blobs)
    assert np.array_equal(ipc.open(descriptor), array)
    bigger = SharedTensorDescriptor(KIND, export.dtype, (4, 4), 1, 1, "cpu:proxy", export.blobs)
    with pytest.raises(tv.DataLossError, match="has 48 bytes, its descriptor says 64"):
        ipc.open(bigger)
    ipc.release(export, consumed=True)
    with pytest.raises(tv.NotFoundError, match="is gone"):
        ipc.open(descriptor)


@pytest.mark.parametrize("text, mode", [("", None), ("auto", None), ("1", True), ("yes", True),
                                        ("0", False), ("off", False)])
def test_device_ipc_mode_from_the_environment(monkeypatch, text, mode):
    monkeypatch.setenv("TENSORVERBS_DEVICE_IPC", text)
    assert device_ipc_mode(None) is mode
    assert device_ipc_mode(False) is False


def test_a_bad_device_ipc_setting_is_named(monkeypatch):
    monkeypatch.setenv("TENSORVERBS_DEVICE_IPC", "maybe")
    with pytest.raises(tv.InvalidArgumentError, match="TENSORVERBS_DEVICE_IPC='maybe'"):
        device_ipc_mode(None)


def test_a_registration_that_could_not_be_written_is_retried(registry):
    reader = HostRegistry(registry.directory)
    registry.directory.rmdir()  # the write fails
    with pytest.raises(OSError):
        registry.register("127.0.0.1:1002", {"GPU-a"})
    registry.directory.mkdir(mode=0o700)
    registry.register("127.0.0.1:1002", {"GPU-a"})
    assert reader.sees("127.0.0.1:1002", "GPU-a")


def test_a_directory_another_user_made_first_does_not_turn_a_jobs_registry_off(tmp_path, monkeypatch):
    """Another user of the host can make the user's default registry directory first (its
    name is known): device IPC is then off without a job token (a warning says so), but a
    job with one uses a directory named from its token, which nobody else can name."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to make a directory as another user")
    monkeypatch.setattr(host_registry, "_root", lambda: tmp_path)
    squatted = tmp_path / f"tensorverbs-ipc-{os.getuid()}"
    squatted.mkdir(mode=0o700)
    os.chown(squatted, 65534, 65534)
    with pytest.raises(tv.FailedPreconditionError, match="not a directory of this user's alone"):
        HostRegistry()
    token = JobToken("job-token-77e0")
    mine = HostRegistry(token=token)
    assert mine.directory.parent == tmp_path and mine.directory != squatted
    assert HostRegistry(token=JobToken("job-token-77e0")).directory == mine.directory  # the job's tasks agree
    assert HostRegistry(token=JobToken("another-token")).directory != mine.directory
    assert "77e0" not in mine.directory.name
