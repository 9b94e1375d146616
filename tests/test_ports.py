"""Ports chosen for tasks stay out of the kernel's ephemeral range, where an outgoing
connection or a port-0 listener could take them before their task binds them."""
import socket

import pytest

from tensorverbs.ports import bind_failure, candidates, free_port


@pytest.mark.parametrize("ephemeral, expected", [
    ("32768\t60999\n", range(1024, 32768)),   # Linux's default: below it
    ("2000 50000", range(50001, 65536)),      # little below: above it
    ("1100 65000", range(1024, 65536)),       # little either side: anywhere
    ("garbage", range(1024, 65536)),
])
def test_candidates_avoid_the_ephemeral_range(tmp_path, ephemeral, expected):
    path = tmp_path / "ip_local_port_range"
    path.write_text(ephemeral)
    assert candidates(str(path)) == expected


def test_free_port_is_outside_the_ephemeral_range_and_bindable():
    taken = [free_port()]
    for _ in range(20):
        taken.append(free_port(taken=taken))
    assert len(set(taken)) == len(taken)
    assert all(port in candidates() for port in taken)
    with socket.socket() as s:
        s.bind(("127.0.0.1", taken[-1]))


def test_a_host_that_cannot_be_listened_on_is_named():
    import tensorverbs as tv
    with pytest.raises(tv.InvalidArgumentError, match="no-such-host.invalid"):
        free_port("no-such-host.invalid")


def test_a_task_whose_port_is_taken_says_so():
    """Two servers at one address: the second names the cause, not only gRPC's "failed to
    bind"."""
    import tensorverbs as tv
    from tensorverbs.local_cluster import cluster_spec

    cluster = cluster_spec({"ps": 1})
    with tv.Server(cluster, "ps", 0):
        with pytest.raises(tv.UnavailableError, match=(
                rf"cannot listen on {cluster['ps'][0]}: address already in use .*already running")):
            tv.Server(cluster, "ps", 0)


@pytest.mark.parametrize("reuse_port", [False, True], ids=["plain", "SO_REUSEPORT"])
def test_a_port_another_listener_holds_is_refused(reuse_port):
    """A task never shares its port, not even with a listener that allows it (SO_REUSEPORT,
    which gRPC sets by default: a task's server turns it off)."""
    import tensorverbs as tv

    port = free_port()
    with socket.socket() as other:
        if reuse_port:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", port))
        other.listen()
        with pytest.raises(tv.UnavailableError, match="address already in use"):
            tv.Server({"ps": [f"127.0.0.1:{port}"]}, "ps", 0)


def test_an_address_not_of_this_host_is_named():
    import tensorverbs as tv

    address = f"192.0.2.1:{free_port()}"  # TEST-NET-1: nobody's
    with pytest.raises(tv.UnavailableError, match=rf"cannot listen on {address}: 192.0.2.1 is not an address of this host"):
        tv.Server({"ps": [address]}, "ps", 0)


def test_why_a_port_cannot_be_bound():
    port = free_port()
    assert bind_failure(f"127.0.0.1:{port}") is None
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert bind_failure(f"127.0.0.1:{port}").startswith("address already in use")
        assert bind_failure(f"0.0.0.0:{port}").startswith("address already in use")
