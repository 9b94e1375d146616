"""Other "hosts" on this machine: a network namespace joined to this one by a veth pair
(:func:`namespace`), several on a switch, their links rate-limited (:func:`switch`), or
two joined by several links (:func:`linked_pair`).

Every namespace gets a tag no other namespace of this machine holds at that moment (the
kernel's refusal of a name in use settles it, so parallel runs never collide), and its
names and /30 subnet follow from the tag."""
from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterator

#: tags 0 .. TAGS-1 map one to one onto the /30 subnets of 10.214.0.0/16
TAGS = 1 << 14


@dataclass
class Namespace:
    name: str
    host_ip: str    # this side of the veth pair
    inner_ip: str   # the namespace's side
    inner_link: str  # the namespace's end of the veth pair


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _tried(*args: str) -> bool:
    """Run ``ip args``; whether it succeeded (a name in use fails it)."""
    return subprocess.run(["ip", *args], capture_output=True).returncode == 0


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    try:
        with bare_namespace():
            pass
    except subprocess.CalledProcessError as exc:
        return f"'ip netns add' failed: {exc.stderr.strip()}"
    return None


@contextlib.contextmanager
def bare_namespace(prefix: str = "tvprobe") -> Iterator[str]:
    """The name of a fresh, empty namespace; removed afterwards."""
    name = f"{prefix}{os.getpid()}x{random.randrange(1 << 20)}"
    _ip("netns", "add", name)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _claim() -> tuple[int, str, str, str]:
    """(tag, namespace, host link, namespace link), the namespace made and the veth pair
    created, for a tag no one else holds."""
    start = random.randrange(TAGS)
    for i in range(TAGS):
        tag = (start + i) % TAGS
        name, outer, inner = f"tvns{tag}", f"tvh{tag}", f"tvn{tag}"
        if not _tried("netns", "add", name):
            continue  # held by another run
        if _tried("link", "add", outer, "type", "veth", "peer", "name", inner):
            return tag, name, outer, inner
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    raise RuntimeError("no free network namespace tag")


@contextlib.contextmanager
def namespace() -> Iterator[Namespace]:
    """A fresh namespace with a veth link to this one; removed afterwards."""
    tag, name, outer, inner = _claim()
    base = tag * 4
    subnet = f"10.214.{base // 256}"
    host_ip, inner_ip = f"{subnet}.{base % 256 + 1}", f"{subnet}.{base % 256 + 2}"
    try:
        _ip("link", "set", inner, "netns", name)
        _ip("addr", "add", f"{host_ip}/30", "dev", outer)
        _ip("link", "set", outer, "up")
        _ip("-n", name, "addr", "add", f"{inner_ip}/30", "dev", inner)
        _ip("-n", name, "link", "set", inner, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield Namespace(name, host_ip, inner_ip, inner)
    finally:
        subprocess.run(["ip", "link", "del", outer], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@dataclass
class Host:
    """A namespace on a switch: its name and address."""

    name: str
    ip: str


def _shape(rate: str, *device: str) -> None:
    """Limit ``device``'s egress (``[-n ns] dev``) to ``rate`` (tc's units: "1gbit") by a
    token bucket whose burst is a hundredth of a second at that rate."""
    burst = max(32 << 10, rate_bits(rate) // 8 // 100)
    subprocess.run(["tc", *device[:-1], "qdisc", "replace", "dev", device[-1], "root", "tbf", "rate", rate,
                    "burst", str(burst), "latency", "100ms"], check=True, capture_output=True, text=True)


def rate_bits(rate: str) -> int:
    """Bits per second of a tc rate ("1gbit", "500mbit", "100kbit"); ValueError if it is
    not one."""
    units = {"gbit": 10 ** 9, "mbit": 10 ** 6, "kbit": 10 ** 3, "bit": 1}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return int(float(rate[:-len(unit)]) * scale)
    raise ValueError(f"rate {rate!r}: expected a number and gbit, mbit, kbit or bit")


@contextlib.contextmanager
def switch(count: int, rate: str | None = None) -> Iterator[list[Host]]:
    """``count`` namespaces, each a host with one link to a bridge of this namespace (a
    switch), in one /24; each link shaped to ``rate`` both ways (tc token bucket on both
    ends of its veth pair) if given; removed afterwards."""
    for tag in random.sample(range(256), 256):
        bridge = f"tvbr{tag}"
        if _tried("link", "add", bridge, "type", "bridge"):
            break
    else:
        raise RuntimeError("no free bridge tag")
    made: list[tuple[str, str]] = []
    try:
        _ip("link", "set", bridge, "up")
        hosts = []
        for i in range(count):
            _, name, outer, inner = _claim()
            made.append((name, outer))
            ip = f"10.215.{tag}.{i + 1}"
            _ip("link", "set", inner, "netns", name)
            _ip("link", "set", outer, "master", bridge)
            _ip("link", "set", outer, "up")
            _ip("-n", name, "addr", "add", f"{ip}/24", "dev", inner)
            _ip("-n", name, "link", "set", inner, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            if rate is not None:
                _shape(rate, outer)
                _shape(rate, "-n", name, inner)
            hosts.append(Host(name, ip))
        yield hosts
    finally:
        for name, outer in made:
            subprocess.run(["ip", "link", "del", outer], capture_output=True)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)


@dataclass
class LinkedHost:
    """One of :func:`linked_pair`'s hosts: its namespace, and per link (in order) its
    address and its end of the link's veth pair."""

    name: str
    ips: list[str]
    devices: list[str]


def tx_bytes(host: LinkedHost, link: int) -> int:
    """The bytes ``host`` has sent on link ``link`` (from 0) so far."""
    path = f"/sys/class/net/{host.devices[link]}/statistics/tx_bytes"
    out = subprocess.run(["ip", "netns", "exec", host.name, "cat", path], check=True,
                         capture_output=True, text=True)
    return int(out.stdout)


@contextlib.contextmanager
def linked_pair(links: int, rate: str | None = None) -> Iterator[tuple[LinkedHost, LinkedHost]]:
    """Two namespaces joined by ``links`` veth pairs, each its own /30 subnet, each
    shaped to ``rate`` both ways (tc token bucket) if given; removed afterwards."""
    claimed = [_claim() for _ in range(max(links, 2))]
    a, b = claimed[0][1], claimed[1][1]
    hosts = LinkedHost(a, [], []), LinkedHost(b, [], [])
    try:
        for tag, name, outer, inner in claimed[:links]:
            base = tag * 4
            subnet = f"10.214.{base // 256}"
            ends = ((hosts[0], inner, f"{subnet}.{base % 256 + 1}"), (hosts[1], outer, f"{subnet}.{base % 256 + 2}"))
            for host, device, ip in ends:
                _ip("link", "set", device, "netns", host.name)
                _ip("-n", host.name, "addr", "add", f"{ip}/30", "dev", device)
                _ip("-n", host.name, "link", "set", device, "up")
                if rate is not None:
                    _shape(rate, "-n", host.name, device)
                host.ips.append(ip)
                host.devices.append(device)
        for host in hosts:
            _ip("-n", host.name, "link", "set", "lo", "up")
        for _, name, _, _ in claimed[2:]:  # (held only for their tags' veth pairs)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        yield hosts
    finally:
        for tag, name, outer, _ in claimed:
            subprocess.run(["ip", "link", "del", outer], capture_output=True)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
