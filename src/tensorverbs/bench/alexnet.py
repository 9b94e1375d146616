"""``tensorverbs bench alexnet``: synchronous data-parallel AlexNet training on a local
cluster of one parameter server and N workers, each a process, per protocol.

Every step, the ps sends the current weights to each worker (``send(name, w, to=worker,
step_id=step)``); each worker receives them, computes the gradients of AlexNet on a
random batch of 224x224 RGB images and sends them back; the ps receives every worker's
gradients, applies SGD with their average (``w -= lr / N * g`` for each worker's g, in
place) and goes on with the next step. ``--compute none`` skips the model math on both
sides while tensors of the same shapes still move, so the step time is communication.

For each worker count, the clusters of all protocols run side by side and take turns
in blocks of steps, so that a noisy machine slows them alike. Steps are timed inside the
processes.

    tensorverbs bench alexnet --workers 2 --compute none --plot alexnet.png
    tensorverbs bench alexnet --steps 300 --batch 24        # the paper's setting
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Callable

import numpy as np
from rich.markup import escape

from ..errors import TensorverbsError
from ..local_cluster import cluster_spec
from . import report
from .contenders import Contender, by_name
from .alexnet_roles import LEARNING_RATE, join_steps
from .model import PARAMETERS
from .peer import Peer, PeerError, close_all

#: the protocols (contenders of ``bench transfer`` that are tensorverbs protocols) by default
PROTOCOLS = ("grpc", "grpc+verbs")


# ------------------------------------------------------------------------ the parent
class Cluster:
    """A ps and ``workers`` workers running ``contender``'s protocol, each a process."""

    def __init__(self, contender: Contender, workers: int, compute: bool, batch: int,
                 shapes: list | None = None, verify: bool = False) -> None:
        self.contender, self.workers, self.verify = contender, workers, verify
        spec = cluster_spec({"ps": 1, "worker": workers})
        protocol = contender.options["protocol"]
        here = "tensorverbs.bench.alexnet_roles:"
        env = contender.env
        self.ps = Peer(f"{contender.name} ps", here + "ParameterServer", spec, protocol, compute,
                       workers, shapes, verify, env=env, wait=False)
        self.peers = [self.ps] + [
            Peer(f"{contender.name} worker {i}", here + "Worker", spec, i, protocol, compute,
                 workers, batch, shapes, verify, env=env, wait=False) for i in range(workers)]
        try:
            for peer in self.peers:
                peer.ready()
        except BaseException:
            self.close()
            raise
        self.steps: list[dict] = []

    def run(self, first: int, count: int, advance: Callable[[], None]) -> None:
        """Train ``count`` steps; each step's record joins the ps's and the workers'."""
        for peer in self.peers:
            peer.post("run", first, count)
        ps = self.ps.result(progress=lambda _: advance())
        self.steps += join_steps(ps, [peer.result() for peer in self.peers[1:]], self.verify)

    def close(self) -> None:
        close_all(self.peers)


def summarize(name: str, workers: int, batch: int, steps: list[dict], warmup: int) -> dict:
    """Steps/s and images/s after the warm-up (the steps over their total time, with the 95 %
    confidence interval ``ci95`` = [low, high] of that rate, high None when unbounded) and the compute/communication
    split of one run."""
    timed = [s for s in steps if s["step"] >= warmup]
    rate, low, high = report.rate_interval([s["seconds"] for s in timed])
    images = batch * workers
    top = high * images if high != float("inf") else None  # JSON has no infinity
    return {
        "protocol": name, "workers": workers, "timed_steps": len(timed),
        "steps_per_s": {"mean": rate, "ci95": [low, None if top is None else high]},
        "images_per_s": {"mean": rate * images, "ci95": [low * images, top]},
        "step_ms": {k: 1e3 * float(np.mean([s[k] for s in timed]))
                    for k in ("seconds", "compute", "communication")},
        "verified": all(s["verified"] for s in steps) if steps and "verified" in steps[0] else None,
        "steps": steps,
    }


def train(contenders: list[Contender], worker_counts: list[int], steps: int, warmup: int,
          rounds: int, batch: int, compute: bool, shapes: list | None = None,
          verify: bool = False, launcher: str = "local") -> list[dict]:
    """Every protocol at every worker count; one summary per (protocol, workers).
    ``shapes``/``verify``: see :class:`ParameterServer`. ``launcher="ray"`` runs each
    cluster's steps at once as Ray actors (:mod:`.alexnet_ray`; no turns, no ``rounds``)."""
    total = len(worker_counts) * len(contenders) * (steps + warmup)
    runs = []
    with report.progress() as bar:
        task = bar.add_task("training steps", total=total)
        for n in worker_counts:
            bar.update(task, description=f"{n} worker{'s' * (n > 1)}")
            if launcher == "ray":
                from .alexnet_ray import run_on_ray

                for c in contenders:
                    records = run_on_ray(c, n, compute, batch, warmup + steps, shapes, verify)
                    bar.advance(task, warmup + steps)
                    runs.append(summarize(c.name, n, batch, records, warmup))
                continue
            clusters = []
            try:
                for c in contenders:
                    clusters.append(Cluster(c, n, compute, batch, shapes, verify))
                for cluster in clusters:
                    cluster.run(0, warmup, lambda: bar.advance(task))
                blocks = _blocks(steps, rounds)
                first = warmup
                for r, count in enumerate(blocks):
                    for cluster in clusters[r % len(clusters):] + clusters[:r % len(clusters)]:
                        cluster.run(first, count, lambda: bar.advance(task))
                    first += count
            finally:
                for cluster in clusters:
                    cluster.close()
            runs += [summarize(c.contender.name, n, batch, c.steps, warmup) for c in clusters]
    for run in runs:
        one = next(r for r in runs if r["protocol"] == run["protocol"] and r["workers"] == 1) \
            if 1 in worker_counts else None
        run["scaling_efficiency"] = (run["images_per_s"]["mean"] / (run["workers"] * one["images_per_s"]["mean"])
                                     if one else None)
    return runs


def _blocks(steps: int, rounds: int) -> list[int]:
    """``steps`` split into ``rounds`` blocks as even as can be (none empty)."""
    rounds = max(1, min(rounds, steps))
    return [steps // rounds + (i < steps % rounds) for i in range(rounds)]


def goals(runs: list[dict], compute: bool) -> list[dict]:
    """The native core's goal: with ``--compute none`` and 2 workers, grpc+verbs at 10x grpc."""
    find = {(r["protocol"], r["workers"]): r for r in runs}
    verbs, grpc = find.get(("grpc+verbs", 2)), find.get(("grpc", 2))
    if compute or verbs is None or grpc is None:
        return []
    a, b = verbs["steps_per_s"]["mean"], grpc["steps_per_s"]["mean"]
    return [{"goal": "--compute none, 2 workers: grpc+verbs ≥ 10x the steps/s of grpc",
             "measured": f"{a:.2f} vs {b:.2f} steps/s = {a / b:.1f}x", "ratio": a / b,
             "met": a / b >= 10}]


def show(result: dict) -> None:
    """Print the results as tables."""
    runs = result["runs"]
    rows = []
    for r in runs:
        s, i, ms = r["steps_per_s"], r["images_per_s"], r["step_ms"]
        eff = r["scaling_efficiency"]
        rows.append([r["protocol"], r["workers"], f"{s['mean']:.3g}", _interval(s["ci95"]),
                     f"{i['mean']:.3g}", f"{ms['seconds']:.0f}", f"{ms['compute']:.0f}",
                     f"{ms['communication']:.0f}", "-" if eff is None else f"{eff:.0%}"])
    settings = result["settings"]
    title = (f"AlexNet, batch {settings['batch']} per worker, compute {settings['compute']}, "
             f"{settings['steps']} steps after {settings['warmup']} warm-up")
    report.console.print(report.table(
        title, ["protocol", "workers", "steps/s", "95% CI", "images/s", "step ms", "compute",
                "comm", "scaling"], rows, caption="steps/s: the timed steps over their time; 95% CI: the confidence "
                                                  "interval of that rate (Student's t); ms: mean per step; "
                                                  "compute: the slowest worker's gradients plus the ps's update"))
    bad = [f"{r['protocol']} with {r['workers']}" for r in runs if r["verified"] is False]
    if bad:
        report.console.print(f"[red]tensors arrived damaged[/]: {', '.join(bad)} workers")
    elif settings["verify"]:
        report.console.print("every tensor of every step arrived intact (CRC-32 on both sides)")
    if result["goals"]:
        report.console.print(report.table("goals", ["goal", "measured", ""],
                                          report.goal_rows(result["goals"])))


def _interval(bounds: list) -> str:
    """``[low, high]`` as the table shows it."""
    low, high = bounds
    return f"{low:.3g}–{high:.3g}" if high is not None else f"≥ {low:.3g}"


def plot(result: dict, path: str) -> None:
    """Write a PNG of steps/s against workers, per protocol."""
    series, errors = {}, {}
    for name in dict.fromkeys(r["protocol"] for r in result["runs"]):
        runs = [r for r in result["runs"] if r["protocol"] == name]
        series[name] = ([r["workers"] for r in runs], [r["steps_per_s"]["mean"] for r in runs])
        means = [r["steps_per_s"]["mean"] for r in runs]
        intervals = [r["steps_per_s"]["ci95"] for r in runs]
        errors[name] = [[m - low for m, (low, _) in zip(means, intervals)],
                        [(2 * m if high is None else high) - m for m, (_, high) in zip(means, intervals)]]
    s = result["settings"]
    report.plot(path, f"AlexNet parameter server, batch {s['batch']}, compute {s['compute']}",
                "workers", "steps/s (95% confidence interval)", series, errors=errors,
                xticks={n: str(n) for n in s["worker_counts"]})


def parser() -> argparse.ArgumentParser:
    """The command-line arguments of ``tensorverbs bench alexnet``."""
    p = argparse.ArgumentParser(prog="tensorverbs bench alexnet", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2, help="up to this many workers, from 1 (default 2)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per run (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--rounds", type=int, default=4,
                   help="blocks of steps the protocols take turns in (default 4)")
    p.add_argument("--batch", type=int, default=8, help="images per worker and step (default 8; the paper: 24)")
    p.add_argument("--compute", choices=("auto", "torch", "none"), default="auto",
                   help="torch: real AlexNet gradients; none: only the tensors move; "
                        "auto: torch when installed (default)")
    p.add_argument("--protocols", default=",".join(PROTOCOLS),
                   help=f"comma-separated (default {','.join(PROTOCOLS)}; also 'grpc+verbs tcp')")
    p.add_argument("--launcher", choices=("local", "ray"), default="local",
                   help="local: each task a child process (default); ray: each task a Ray actor "
                        "(tensorverbs.ray.run_cluster on the Ray cluster ray.init() finds or starts)")
    p.add_argument("--verify", action="store_true",
                   help="check every step's tensors on both sides (CRC-32; slows the steps)")
    p.add_argument("--json", default="alexnet.json", help="where the results go (default alexnet.json)")
    p.add_argument("--plot", nargs="?", const="alexnet.png", metavar="PNG",
                   help="also plot steps/s against workers (default file alexnet.png)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    args = p.parse_args(argv)
    if min(args.workers, args.steps, args.batch, args.rounds) < 1 or args.warmup < 0:
        p.error("give --workers, --steps, --batch and --rounds >= 1 and --warmup >= 0")
    try:
        contenders = by_name(args.protocols.split(","))
    except ValueError as exc:
        p.error(str(exc))
    if any("protocol" not in c.options for c in contenders):
        p.error("--protocols takes tensorverbs protocols: grpc, grpc+verbs, grpc+verbs tcp")
    has_torch = importlib.util.find_spec("torch") is not None
    if args.compute == "torch" and not has_torch:
        p.error("--compute torch needs torch (pip install 'tensorverbs[torch]'); or use --compute none")
    compute = args.compute == "torch" or (args.compute == "auto" and has_torch)
    for c in contenders:
        ok, about = c.availability()
        if not ok:
            p.error(f"{c.name} is not available: {about}")
    counts = list(range(1, args.workers + 1))
    report.console.print(f"AlexNet ({PARAMETERS / 1e6:.1f} M parameters, {4 * PARAMETERS / 2**20:.0f} MiB "
                         f"each way per worker and step), compute {'torch' if compute else 'none'}")
    try:
        runs = train(contenders, counts, args.steps, args.warmup, args.rounds, args.batch, compute,
                     verify=args.verify, launcher=args.launcher)
    except (PeerError, TensorverbsError) as exc:
        report.console.print(f"[red]the benchmark failed[/]: {escape(str(exc))}")
        return 1
    settings = {"workers": args.workers, "worker_counts": counts, "steps": args.steps,
                "warmup": args.warmup, "rounds": args.rounds, "batch": args.batch,
                "compute": "torch" if compute else "none", "parameters": PARAMETERS,
                "learning_rate": LEARNING_RATE, "verify": args.verify, "launcher": args.launcher}
    result = {"benchmark": "alexnet", "settings": settings, "runs": runs, "goals": goals(runs, compute)}
    show(result)
    plotted = report.save(result, ["alexnet", *argv], args.json, args.plot, plot)
    return 1 if any(r["verified"] is False for r in runs) else 0 if plotted else 2
