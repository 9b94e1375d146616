"""CUDA tensors through the API beyond TensorFlow's: torch-native results on the GPU (every
dtype torch has, casts on receipt), batches, broadcast, send completion and asyncio, on every
protocol variant (a device the provider cannot register goes through the CPU proxy). They
run where torch sees a GPU."""
from __future__ import annotations

import asyncio

import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import cluster_spec, pattern, same

TIMEOUT = 60


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU here")
    return torch


def cuda_pattern(torch, n: int, seed: int, dtype):
    """``n`` elements of ``dtype`` on the GPU, different for each seed."""
    values = torch.arange(n, dtype=torch.float32, device="cuda:0") * 0.25 + seed
    return values.to(dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float8_e4m3fn", "bool", "int8", "complex64"])
def test_a_cuda_tensor_of_each_torch_dtype_comes_back_on_the_gpu(pair, step, torch, dtype):
    tensor = cuda_pattern(torch, 4099, step, getattr(torch, dtype))
    pair.worker.send("t", tensor, to=pair.PS, step_id=step)
    host = pair.ps.recv("t", pair.WORKER, step, timeout=TIMEOUT)  # through the host, as numpy
    pair.ps.send("back", host, to=pair.WORKER, step_id=step)
    back = pair.worker.recv("back", pair.PS, step, timeout=TIMEOUT, device="cuda:0")
    assert back.device.type == "cuda" and back.dtype == tensor.dtype
    assert torch.equal(back.view(torch.uint8), tensor.view(torch.uint8))


def test_a_cast_on_receipt_onto_the_gpu(pair, step, torch):
    pair.ps.send_pattern("f32", pair.WORKER, step, 4 << 10, step, "float32")
    got = pair.worker.recv("f32", pair.PS, step, timeout=TIMEOUT, device="cuda:0", dtype=torch.bfloat16)
    # the GPU's own conversion (it rounds NaNs and subnormals its own way)
    want = torch.from_numpy(pattern(4 << 10, step, "float32")).to("cuda:0").to(torch.bfloat16)
    assert got.device.type == "cuda" and got.dtype == torch.bfloat16
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))  # NaNs too


def test_a_batch_onto_the_gpu_and_into_cuda_outs(pair, step, torch):
    sizes = [16, 64 << 10, 4 << 20]
    for i, n in enumerate(sizes):
        pair.ps.send_pattern(f"d{i}", pair.WORKER, step, n, step + i, "float32")
        pair.ps.send_pattern(f"o{i}", pair.WORKER, step, n, step + i, "float32")
    onto = pair.worker.recv_many([(f"d{i}", pair.PS, step) for i in range(len(sizes))],
                                 timeout=TIMEOUT, device="cuda:0")
    outs = [torch.zeros(n // 4, device="cuda:0") for n in sizes]
    into = pair.worker.recv_many([tv.RecvEntry(f"o{i}", pair.PS, step, out) for i, out in enumerate(outs)],
                                 timeout=TIMEOUT)
    for i, n in enumerate(sizes):
        want = pattern(n, step + i, "float32")
        assert onto[i].device.type == "cuda" and same(onto[i].cpu().numpy(), want)
        assert into[i] is outs[i] and same(outs[i].cpu().numpy(), want)


def test_a_cuda_tensor_broadcast_to_a_peer_and_to_this_task(pair, step, torch):
    tensor = cuda_pattern(torch, 1 << 18, step, torch.float32)
    handle = pair.worker.send("b", tensor, to=[pair.PS, pair.WORKER], step_id=step)
    mine = pair.worker.recv("b", pair.WORKER, step, timeout=TIMEOUT, device="cuda:0")
    assert not handle.done()  # the ps has not asked for it
    assert same(pair.ps.recv("b", pair.WORKER, step, timeout=TIMEOUT), tensor.cpu().numpy())
    handle.wait(timeout=TIMEOUT)
    assert mine.device.type == "cuda" and torch.equal(mine, tensor)


def test_a_cuda_send_completes_and_flushes(pair, step, torch):
    handles = pair.worker.send_many([(f"s{i}", cuda_pattern(torch, 1000 * (i + 1), step + i, torch.float16),
                                      pair.PS, step) for i in range(3)])
    for i in range(3):
        pair.ps.post("recv", f"s{i}", pair.WORKER, step, timeout=TIMEOUT)
    pair.worker.flush(timeout=TIMEOUT)
    assert all(h.done() and h.exception(timeout=0) is None for h in handles)
    for i in range(3):
        got = pair.ps.result()
        assert same(got, cuda_pattern(torch, 1000 * (i + 1), step + i, torch.float16).cpu().numpy())


def test_arecv_into_a_cuda_out(pair, step, torch):
    out = torch.zeros(1 << 16, device="cuda:0")
    pair.ps.send_pattern("a", pair.WORKER, step, 1 << 18, step, "float32")

    async def main():
        return await pair.worker.arecv("a", pair.PS, step, timeout=TIMEOUT, out=out)

    assert asyncio.run(main()) is out
    assert same(out.cpu().numpy(), pattern(1 << 18, step, "float32"))


@pytest.mark.parametrize("protocol", ["grpc", "grpc+verbs"])
def test_a_cuda_tensor_between_two_servers_of_one_process(torch, step, protocol):
    """CUDA IPC cannot open a handle in the process that exported it: a task of the same
    process gets the tensor through host proxies, every time (the second time too, when
    the host knows that it sees the GPU)."""
    cluster = cluster_spec({"a": 1, "b": 1})
    with tv.Server(cluster, "a", 0, protocol) as a, tv.Server(cluster, "b", 0, protocol) as b:
        for i in range(3):
            tensor = cuda_pattern(torch, 1 << 16, step + i, torch.float32)
            a.send("t", tensor, to=b.task, step_id=step + i)
            got = b.recv("t", a.task, step + i, timeout=TIMEOUT, device="cuda:0")
            assert got.device.type == "cuda" and torch.equal(got, tensor)
        assert a.stats()["ipc_sent"] == 0


def test_a_cuda_tensor_is_read_into_and_written_from_one_sided(pair, step, torch):
    """One-sided access reaches host memory only (no GPUDirect): a read into a CUDA
    ``out`` lands in a pinned host buffer first, a write of a CUDA tensor goes from a host
    copy, and registering a CUDA tensor is refused, naming its device."""
    nbytes = 1 << 20
    buffer = pair.ps.run("remote_buffers:register_pattern", nbytes, step)
    out = torch.zeros(nbytes, dtype=torch.uint8, device="cuda:0")
    assert pair.worker.read(buffer, out, timeout=TIMEOUT) is out
    assert same(out.cpu().numpy(), pattern(nbytes, step))
    half = torch.from_numpy(pattern(nbytes // 2, step + 1)).to("cuda:0")
    pair.worker.write(buffer, half, offset=nbytes // 4, timeout=TIMEOUT)
    assert pair.ps.run("remote_buffers:holds", buffer, nbytes // 4, nbytes // 2, step + 1)
    with pytest.raises(tv.InvalidArgumentError, match="cuda:0"):
        pair.worker.register(out)
    pair.ps.unregister(buffer)
