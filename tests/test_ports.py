"""Ports chosen for tasks stay out of the kernel's ephemeral range, where an outgoing
connection or a port-0 listener could take them before their task binds them."""
import socket

import pytest

from tensorverbs.ports import candidates, free_port


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
