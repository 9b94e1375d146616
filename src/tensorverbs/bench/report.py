"""What the benchmarks show and keep: rich tables and progress, statistics, the machine,
JSON results and matplotlib plots."""
from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

#: the terminal; written to a file or a pipe, lines are 120 characters wide
console = Console(width=None if sys.stdout.isatty() else 120)


# ---------------------------------------------------------------------------- numbers
def human_size(nbytes: int) -> str:
    """``4096`` -> ``"4 KiB"``; sizes that are no whole unit stay in bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """count, median, p25, p75, p99, min, max and mean of ``samples``."""
    a = np.asarray(samples, dtype=np.float64)
    p25, median, p75, p99 = np.percentile(a, [25, 50, 75, 99])
    return {"count": int(a.size), "median": float(median), "p25": float(p25), "p75": float(p75),
            "p99": float(p99), "min": float(a.min()), "max": float(a.max()), "mean": float(a.mean())}


def mean_ci(samples: Sequence[float]) -> tuple[float, float]:
    """(mean, 1.96 standard deviations) of ``samples`` (0 for a single sample): the spread
    of the samples, not an interval of their mean (:func:`mean_interval` is that)."""
    mean = statistics.fmean(samples)
    return mean, 1.96 * statistics.stdev(samples) if len(samples) > 1 else 0.0


#: Student's t at 0.975 (a two-sided 95 % interval) for 1 .. 30 degrees of freedom
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_975(df: int) -> float:
    """Student's t quantile at 0.975 for ``df`` >= 1 degrees of freedom: scipy's where it
    is installed, else a table to 30 and the Cornish-Fisher expansion beyond (both within
    0.001 of it)."""
    try:
        from scipy import stats
    except ImportError:
        pass
    else:
        return float(stats.t.ppf(0.975, df))
    if df <= len(_T975):
        return _T975[df - 1]
    z = statistics.NormalDist().inv_cdf(0.975)
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def mean_interval(samples: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of its 95 % confidence interval) of ``samples``, by Student's t
    (0 for a single sample: no interval can be told)."""
    mean = statistics.fmean(samples)
    if len(samples) < 2:
        return mean, 0.0
    return mean, t_975(len(samples) - 1) * statistics.stdev(samples) / len(samples) ** 0.5


def rate_interval(seconds: Sequence[float]) -> tuple[float, float, float]:
    """(rate, low, high) of events that took ``seconds`` each: the rate is their count over
    their total time, and [low, high] its 95 % confidence interval, the reciprocal of the
    interval of the mean time (:func:`mean_interval`; high is inf when that reaches 0)."""
    mean, half = mean_interval(seconds)
    rate = len(seconds) / math.fsum(seconds)
    return rate, 1.0 / (mean + half), (1.0 / (mean - half) if mean > half else math.inf)


# ---------------------------------------------------------------------------- terminal
def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]],
          caption: str | None = None) -> Table:
    """A table whose first column is left-aligned and the others right-aligned."""
    t = Table(title=title, caption=caption)
    for i, column in enumerate(columns):
        t.add_column(column, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for row in rows:
        t.add_row(*(str(cell) for cell in row))
    return t


def progress() -> Progress:
    """A progress bar with a description, a count and the time elapsed."""
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), console=console)


#: how a goals table shows a goal's ``met``
VERDICTS = {True: "[green]met[/]", False: "[red]missed[/]", None: "[yellow]not judged[/]"}


def goal_rows(goals: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Rows of a goals table: the goal, the figure measured, met, missed or not judged
    (``met`` None: the run lacked what the goal needs)."""
    return [[g["goal"], g["measured"], VERDICTS[g["met"]]] for g in goals]


# ---------------------------------------------------------------------------- files
def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {
        "system": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if models:
            info["cpu"] = models[0]
        with open("/proc/meminfo", encoding="utf-8") as f:
            info["memory_gib"] = round(int(f.readline().split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = torch.__version__
    return info


def run_counts(protocols: Sequence[str], counts: Sequence[int], what: str,
               run: Callable[[str, int], dict[str, Any]]) -> list[dict[str, Any]]:
    """``run(protocol, count)`` for every protocol and count, each announced ("grpc: 4
    tasks ..."): the rows, in that order."""
    rows = []
    for protocol in protocols:
        for count in counts:
            console.print(f"{protocol}: {count} {what} ...")
            rows.append(run(protocol, count))
    return rows


def conclude(path: str, result: Mapping[str, Any], argv: Sequence[str]) -> int:
    """Write ``result`` (its ``results`` rows) as JSON at ``path`` and say so; the exit
    status: 1 if a row failed (has an ``error``)."""
    write_json(path, result, argv)
    console.print(f"results written to {path}")
    return 1 if any("error" in r for r in result["results"]) else 0


def write_json(path: str, result: Mapping[str, Any], argv: Sequence[str]) -> None:
    """``result`` with the command line, the time and the machine, as JSON at ``path``."""
    data = {"command": " ".join(["tensorverbs", "bench", *argv]),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), **result}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")


def plot(path: str, title: str, xlabel: str, ylabel: str,
         series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *, log: bool = False,
         errors: Mapping[str, Sequence[float]] | None = None,
         dashed: Iterable[str] = (), xticks: Mapping[float, str] | None = None) -> None:
    """Lines ``label -> (xs, ys)`` (with error bars from ``errors``), as a PNG at ``path``.
    ``log`` makes both axes logarithmic; labels in ``dashed`` are drawn dashed (limits)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dashed = set(dashed)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for label, (xs, ys) in series.items():
        style = "--" if label in dashed else "-"
        yerr = (errors or {}).get(label)
        ax.errorbar(xs, ys, yerr=yerr, fmt=style + "o", markersize=3, capsize=3, label=label)
    if log:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
    if xticks:
        ax.set_xticks(list(xticks), list(xticks.values()),
                      rotation=45 if max(map(len, xticks.values())) > 3 else 0)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def save(result: Mapping[str, Any], argv: Sequence[str], json_path: str, plot_path: str | None,
         draw: Callable[[Mapping[str, Any], str], None]) -> bool:
    """Write the JSON and, when asked, the plot (``draw(result, path)``); False if the plot
    could not be made (matplotlib missing)."""
    write_json(json_path, result, argv)
    console.print(f"results written to {json_path}")
    if plot_path:
        try:
            draw(result, plot_path)
        except ImportError as exc:
            console.print(f"[red]no plot[/]: {exc.name or exc} is missing "
                          "(pip install 'tensorverbs\\[bench]')")
            return False
        console.print(f"plot written to {plot_path}")
    return True
