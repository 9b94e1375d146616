"""The host's topology from sysfs and the NIC chosen for each GPU and NUMA node, on
synthetic sysfs trees (directories, files and symlinks laid out as Linux lays them out):
the nearest NIC wins, ties spread GPUs across NICs, a NIC of another NUMA node is the last
choice, a device without a PCIe place is "unknown"; and on this host's own sysfs."""
from __future__ import annotations

from pathlib import Path

from tensorverbs.verbs import topology
from tensorverbs.verbs.info import _topology


class Sysfs:
    """A synthetic sysfs tree under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def pci(self, path: str, numa: int = 0, vendor: str = "0x15b3", cls: str = "0x020000") -> Path:
        """A PCI device at ``path`` (root complex first, e.g. "pci0000:00/0000:00:01.0/0000:01:00.0"),
        listed under bus/pci/devices."""
        device = self.root / "devices" / path
        device.mkdir(parents=True, exist_ok=True)
        (device / "numa_node").write_text(f"{numa}\n")
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(cls + "\n")
        listed = self.root / "bus" / "pci" / "devices" / device.name
        listed.parent.mkdir(parents=True, exist_ok=True)
        listed.symlink_to(device)
        return device

    def gpu(self, path: str, numa: int = 0) -> None:
        self.pci(path, numa, vendor="0x10de", cls="0x030200")

    def nic(self, name: str, path: str | None, numa: int = 0, netdev: str = "") -> None:
        entry = self.root / "class" / "infiniband" / name
        entry.mkdir(parents=True)
        if path is None:  # soft-RoCE: no PCI device, the interface it runs over
            (entry / "parent").write_text(netdev + "\n")
            return
        device = self.pci(path, numa)
        if netdev:
            (device / "net" / netdev).mkdir(parents=True)
        (entry / "device").symlink_to(device)

    def node(self, node: int, cpus: str) -> None:
        path = self.root / "devices" / "system" / "node" / f"node{node}"
        path.mkdir(parents=True)
        (path / "cpulist").write_text(cpus + "\n")


def chosen(root: Path) -> dict[str, str | None]:
    return {g["gpu"]: g["nic"] for g in topology.choose(topology.read(root))["gpus"]}


def test_each_gpu_gets_the_nic_behind_its_own_switch(tmp_path):
    """Two PCIe switches under two root ports, each with two GPUs and a NIC."""
    s = Sysfs(tmp_path)
    for sw, (bus, nic) in enumerate([("01", "mlx5_0"), ("11", "mlx5_1")]):
        top = f"pci0000:00/0000:00:0{sw + 1}.0/0000:{bus}:00.0"
        s.gpu(f"{top}/0000:{bus[0]}2:08.0/0000:{bus[0]}3:00.0")
        s.gpu(f"{top}/0000:{bus[0]}2:09.0/0000:{bus[0]}4:00.0")
        s.nic(nic, f"{top}/0000:{bus[0]}2:10.0/0000:{bus[0]}5:00.0", netdev=f"eth{sw}")
    found = topology.read(tmp_path)
    assert [n.name for n in found.nics] == ["mlx5_0", "mlx5_1"] and found.nics[0].netdevs == ("eth0",)
    assert [g.pci for g in found.gpus] == ["0000:03:00.0", "0000:04:00.0", "0000:13:00.0", "0000:14:00.0"]
    choices = topology.choose(found)["gpus"]
    assert [(c["gpu"], c["nic"], c["class"]) for c in choices] == [
        ("0000:03:00.0", "mlx5_0", "PIX"), ("0000:04:00.0", "mlx5_0", "PIX"),
        ("0000:13:00.0", "mlx5_1", "PIX"), ("0000:14:00.0", "mlx5_1", "PIX")]
    assert "one PCIe switch" in choices[0]["why"]


def test_gpus_with_equally_near_nics_are_spread_across_them(tmp_path):
    """Four GPUs and two NICs, each on a root port of its own: every NIC is through the
    host bridge from every GPU; the GPUs alternate in PCI order."""
    s = Sysfs(tmp_path)
    for i in range(4):
        s.gpu(f"pci0000:00/0000:00:0{i + 1}.0/0000:0{i + 1}:00.0")
    s.nic("mlx5_0", "pci0000:00/0000:00:05.0/0000:05:00.0")
    s.nic("mlx5_1", "pci0000:00/0000:00:06.0/0000:06:00.0")
    choices = topology.choose(topology.read(tmp_path))["gpus"]
    assert [c["nic"] for c in choices] == ["mlx5_0", "mlx5_1", "mlx5_0", "mlx5_1"]
    assert all(c["class"] == "PHB" and "2 as near" in c["why"] for c in choices)


def test_a_nic_of_another_numa_node_is_chosen_last(tmp_path):
    """Two sockets, a root complex each: a GPU on node 1 takes node 1's NIC though node 0's
    has the lower name; a NUMA node without a NIC is told every NIC."""
    s = Sysfs(tmp_path)
    s.nic("mlx5_0", "pci0000:00/0000:00:01.0/0000:01:00.0", numa=0)
    s.nic("mlx5_1", "pci0000:80/0000:80:01.0/0000:81:00.0", numa=1)
    s.gpu("pci0000:c0/0000:c0:01.0/0000:c1:00.0", numa=1)  # another root complex of node 1
    s.node(0, "0-15")
    s.node(1, "16-31")
    s.node(2, "32-47")
    found = topology.read(tmp_path)
    assert found.nodes == {0: "0-15", 1: "16-31", 2: "32-47"}
    choice = topology.choose(found)
    assert [(g["nic"], g["class"]) for g in choice["gpus"]] == [("mlx5_1", "NODE")]
    assert [(n["node"], n["nics"]) for n in choice["nodes"]] == [
        (0, ["mlx5_0"]), (1, ["mlx5_1"]), (2, ["mlx5_0", "mlx5_1"])]
    assert choice["nodes"][2]["why"].startswith("none on this NUMA node")


def test_a_switch_beats_the_host_bridge_and_fewer_hops_win_within_a_class(tmp_path):
    s = Sysfs(tmp_path)
    s.gpu("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0")
    s.nic("far", "pci0000:00/0000:00:02.0/0000:20:00.0")  # another root port: PHB
    s.nic("deep", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:09.0/0000:04:00.0/0000:05:08.0/0000:06:00.0")
    assert chosen(tmp_path) == {"0000:03:00.0": "deep"}  # PXB (6 hops) before PHB
    s.nic("near", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:07:00.0")
    assert chosen(tmp_path) == {"0000:03:00.0": "near"}  # PIX


def test_a_device_without_a_pcie_place_is_unknown_and_still_chosen_alone(tmp_path):
    s = Sysfs(tmp_path)
    s.nic("rxe0", None, netdev="veth0")
    s.gpu("pci0000:00/0000:00:01.0/0000:01:00.0")
    found = topology.read(tmp_path)
    assert found.nics == [topology.Device("rxe0", None, (), -1, ("veth0",))]
    assert [(g["nic"], g["class"]) for g in topology.choose(found)["gpus"]] == [("rxe0", "unknown")]


def test_non_gpu_pci_devices_and_missing_parts_are_left_out(tmp_path):
    s = Sysfs(tmp_path)
    s.pci("pci0000:00/0000:00:01.0/0000:01:00.0", vendor="0x10de", cls="0x040300")  # NVIDIA audio
    s.pci("pci0000:00/0000:00:02.0/0000:02:00.0", vendor="0x1234", cls="0x030000")  # another VGA
    found = topology.read(tmp_path)
    assert found.gpus == [] and found.nics == [] and found.nodes == {}
    assert topology.read(tmp_path / "absent") == topology.Topology()
    assert topology.choose(found) == {"gpus": [], "nodes": []}


def test_this_hosts_sysfs_reads_and_info_reports_it():
    info = _topology()
    assert set(info) == {"devices", "numa_cpus", "gpus", "nodes"}
    assert [n["node"] for n in info["nodes"]] == sorted(info["numa_cpus"])
    assert all(d["kind"] in ("NIC", "GPU") for d in info["devices"])
    assert len(info["gpus"]) == sum(d["kind"] == "GPU" for d in info["devices"])



def test_odd_layouts_keep_their_pcie_place(tmp_path):
    """A VM's virtual bus before the root complex (Hyper-V), and a sub-function below a
    PCI function (mlx5 SF), keep the place of their root complex and function."""
    s = Sysfs(tmp_path)
    s.gpu("LNXSYSTM:00/VMBUS:01/guid-1/pci7870:00/7870:00:00.0")
    function = s.pci("LNXSYSTM:00/VMBUS:01/guid-1/pci7870:00/7870:00:01.0")
    sub = function / "mlx5_core.sf.2"
    sub.mkdir()
    (tmp_path / "class" / "infiniband" / "mlx5_2").mkdir(parents=True)
    (tmp_path / "class" / "infiniband" / "mlx5_2" / "device").symlink_to(sub)
    found = topology.read(tmp_path)
    assert found.nics[0].pci == "7870:00:01.0" and found.nics[0].path[0] == "pci7870:00"
    assert [(g["nic"], g["class"]) for g in topology.choose(found)["gpus"]] == [("mlx5_2", "PHB")]


def test_unreadable_parts_are_left_out(tmp_path):
    s = Sysfs(tmp_path)
    s.nic("rxe0", None)
    (tmp_path / "class" / "infiniband" / "rxe0" / "parent").write_bytes(b"\xff\xfe")  # not text
    (tmp_path / "devices" / "system" / "node" / "node\u00b2").mkdir(parents=True)  # not a number
    loop = tmp_path / "class" / "infiniband" / "loop"
    loop.mkdir()
    (loop / "device").symlink_to(loop / "device")
    found = topology.read(tmp_path)
    assert [(n.name, n.pci, n.netdevs) for n in found.nics] == [("loop", None, ()), ("rxe0", None, ())]
    assert found.nodes == {}
    assert _topology(str(tmp_path / "absent"))["devices"] == []
