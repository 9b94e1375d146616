"""The faults benchmark: training steps between two hosts (a network namespace and a veth
pair) without loss and through nftables packet loss, side by side in one run, for each
protocol; the step time under loss over the loss-free one. Needs root and nftables (as
the faults suite). Not a test: run it as

    .venv/bin/python tests/faults/bench_loss.py --steps 40 --loss 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # the suite's helpers (tests/faults, tests)

from nft import unavailable_reason  # noqa: E402
from two_hosts import two_hosts  # noqa: E402

from tensorverbs.bench import report  # noqa: E402

#: the variants measured (as the faults suite's): grpc, and grpc+verbs over the soft TCP path
VARIANTS = ("grpc", "verbs")
#: the goal: steps through 3% loss within this factor of the loss-free ones
GOAL = 3.0


def _steps(hosts, count: int) -> list[float]:
    seconds = []
    for _ in range(count):
        start = time.perf_counter()
        hosts.train(1)
        seconds.append(time.perf_counter() - start)
    return seconds


def measure(variant: str, steps: int, loss: int, blocks: int) -> dict:
    """``blocks`` alternations of ``steps`` loss-free and ``steps`` lossy steps (after 2
    warm-up steps), one pair of hosts throughout."""
    clean, lossy = [], []
    with two_hosts(variant) as hosts:
        hosts.train(2)
        for _ in range(blocks):
            hosts.faults.heal()
            clean += _steps(hosts, steps)
            hosts.faults.lose(loss)
            lossy += _steps(hosts, steps)
        dropped = hosts.faults.dropped()
        hosts.faults.heal()
    a, b = statistics.median(lossy), statistics.median(clean)
    return {"variant": variant, "steps": len(clean), "loss_percent": loss, "dropped": dropped,
            "clean_ms": b * 1e3, "lossy_ms": a * 1e3,
            "clean_p90_ms": sorted(clean)[int(0.9 * len(clean))] * 1e3,
            "lossy_p90_ms": sorted(lossy)[int(0.9 * len(lossy))] * 1e3, "ratio": a / b}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="steps per block (default 20)")
    p.add_argument("--blocks", type=int, default=2, help="loss-free/lossy alternations (default 2)")
    p.add_argument("--loss", type=int, default=3, help="percent of packets dropped each way (default 3)")
    p.add_argument("--json", default="loss.json", help="where the results go (default loss.json)")
    args = p.parse_args(argv)
    if (why := unavailable_reason()) is not None:
        report.console.print(f"[red]cannot inject faults here[/]: {why}")
        return 2
    rows = [measure(v, args.steps, args.loss, args.blocks) for v in VARIANTS]
    report.console.print(report.table(
        f"a training step (weights 4 KiB + 256 KiB + 2 MiB one way, gradients back) between two "
        f"hosts, without loss and through {args.loss}% loss each way",
        ["variant", "steps each", "loss-free ms (p90)", "lossy ms (p90)", "lossy / loss-free",
         "packets dropped"],
        [[r["variant"], r["steps"], f"{r['clean_ms']:.1f} ({r['clean_p90_ms']:.1f})",
          f"{r['lossy_ms']:.1f} ({r['lossy_p90_ms']:.1f})", f"{r['ratio']:.2f}x", r["dropped"]]
         for r in rows]))
    verbs = next(r for r in rows if r["variant"] == "verbs")
    report.console.print(f"goal: grpc+verbs steps through {args.loss}% loss within {GOAL:g}x the "
                         f"loss-free ones: {verbs['ratio']:.2f}x, "
                         + ("met" if verbs["ratio"] <= GOAL else "missed"))
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump({"command": " ".join(["tests/faults/bench_loss.py", *(sys.argv[1:] if argv is None else argv)]),
                   "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": report.machine(),
                   "results": rows}, f, indent=2)
    report.console.print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
