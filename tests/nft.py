"""Network faults injected with nftables inside a network namespace: packet loss, an
outage, healing.

The rules live in a table of the namespace's own and match its veth link only, so
nothing outside the namespace (the host's rules, its loopback) is touched; they vanish
with the namespace at the latest. Each change replaces the whole table in one nft
transaction, and the rules count what they drop. The namespace None is this process's
own (the soft-RoCE lane's guest, which exists for the tests alone)."""
from __future__ import annotations

import json
import shutil
import subprocess

from tensorverbs import netns
from tensorverbs.netns import Namespace

TABLE = "tensorverbs_faults"


def _nft(namespace: str | None, script: str = "", *args: str) -> str:
    """Run nft in ``namespace`` (``args``, or ``-f -`` reading ``script``); its output."""
    command = ["ip", "netns", "exec", namespace] if namespace else []
    command += ["nft", *(args or ("-f", "-"))]
    done = subprocess.run(command, input=script, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nft {' '.join(args) or script!r} in {namespace} failed: {done.stderr.strip()}")
    return done.stdout


def replace(namespace: str | None, body: str = "") -> None:
    """Replace the faults table of ``namespace`` by one holding ``body`` (none: no table)."""
    script = f"table inet {TABLE} {{}}\ndelete table inet {TABLE}\n"
    if body:
        script += f"table inet {TABLE} {{\n{body}\n}}\n"
    _nft(namespace, script)


def counted(namespace: str | None) -> int:
    """The packets the faults table of ``namespace`` has dropped (its rules' counters)."""
    listing = json.loads(_nft(namespace, "", "-j", "list", "ruleset"))
    return sum(expr["counter"]["packets"]
               for item in listing["nftables"]
               if "rule" in item and item["rule"]["table"] == TABLE
               for expr in item["rule"]["expr"] if "counter" in expr)


def unavailable_reason() -> str | None:
    """Why faults cannot be injected here (no root, namespaces or nftables), or None."""
    why = netns.unavailable_reason()
    if why is not None:
        return why
    if shutil.which("nft") is None:
        return "nftables ('nft') is not installed (apt-get install nftables)"
    with netns.bare_namespace() as probe:
        try:
            replace(probe, "chain input { type filter hook input priority 0; policy accept; }")
        except RuntimeError as exc:
            return f"nftables cannot filter in a network namespace here: {exc}"
    return None


class Faults:
    """The faults between ``ns`` and the host: both directions of its veth link."""

    def __init__(self, ns: Namespace) -> None:
        self.ns = ns
        self.dropped_before = 0  # packets counted by rules replaced since

    def lose(self, percent: int) -> None:
        """Drop ``percent`` % of the packets each way, at random."""
        self._drop(f"numgen random mod 100 < {int(percent)}")

    def cut(self) -> None:
        """Drop every packet each way (an outage, or a partition)."""
        self._drop("")

    def heal(self) -> None:
        """Drop nothing any more."""
        self.dropped_before = self.dropped()
        replace(self.ns.name)

    def dropped(self) -> int:
        """Packets the rules dropped since the first fault (both directions)."""
        return self.dropped_before + counted(self.ns.name)

    def _drop(self, condition: str) -> None:
        self.dropped_before = self.dropped()
        link = self.ns.inner_link
        replace(self.ns.name, "\n".join(
            f"  chain {hook} {{ type filter hook {hook} priority 0; policy accept;"
            f" {side} \"{link}\" {condition} counter drop; }}"
            for hook, side in (("input", "iifname"), ("output", "oifname"))))
