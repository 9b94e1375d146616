"""The ``tensorverbs`` command: server, certs, tf-config, demo, info, bench and top."""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import os
import signal
import sys
from typing import Any, Sequence

from .cluster import ClusterSpec
from .errors import InvalidArgumentError, TensorverbsError
from .metrics.scrape import metrics_url
from .server import PROTOCOLS, Server

#: ``tensorverbs bench NAME`` -> the module whose ``main(argv)`` runs it
BENCHMARKS = {
    "transfer": "tensorverbs.bench.transfer",
    "alexnet": "tensorverbs.bench.alexnet",
    "verbs": "tensorverbs.bench.verbs_write",
    "scale": "tensorverbs.bench.scale",
    "sync": "tensorverbs.bench.sync",
    "publication": "tensorverbs.bench.publication",
    "links": "tensorverbs.bench.links",
}
#: the exit status of a usage error (argparse's), and of an error while running
USAGE, FAILED = 2, 1


def _json(text: str) -> Any:
    """The JSON of ``text``: a file's path (else JSON text, which starts with { or [)."""
    where = ""
    if os.path.exists(text) or not text.lstrip().startswith(("{", "[")):
        try:
            with open(text, encoding="utf-8") as f:
                text, where = f.read(), f"{text} is "
        except FileNotFoundError:
            raise argparse.ArgumentTypeError(f"no such file: {text}") from None
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"{text}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"{where}not valid JSON at line {exc.lineno} col {exc.colno}: {exc.msg}") from None


def _cluster(text: str) -> ClusterSpec:
    """``--cluster``: a JSON file or JSON text, ``{job: [host:port, ...]}`` or TF_CONFIG's."""
    data = _json(text)
    try:
        return ClusterSpec(data.get("cluster", data) if isinstance(data, dict) else data)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _positive(text: str) -> int:
    """An integer above 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _seconds(text: str) -> float:
    """A duration: a finite number of seconds, not negative."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text} is {'negative' if value < 0 else 'not finite'}")
    return value


def _protocols(text: str) -> list[str]:
    """Protocols, comma-separated."""
    protocols = text.split(",")
    for protocol in protocols:
        if protocol not in PROTOCOLS:
            raise argparse.ArgumentTypeError(
                f"unknown protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    return protocols


def _endpoint(text: str) -> str:
    """A metrics endpoint, as given."""
    try:
        metrics_url(text)  # refuses what is not HOST:PORT or an http(s) URL
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return text


def _load_cluster(given: ClusterSpec | None) -> ClusterSpec:
    """The cluster given, else TF_CONFIG's."""
    return ClusterSpec.from_tf_config() if given is None else given


def _server(args: argparse.Namespace) -> int:
    server = Server(_load_cluster(args.cluster), args.job, args.task, args.protocol,
                    startup_grace=args.startup_grace, bind_address=args.bind,
                    metrics_port=args.metrics_port)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: server.stop())
    metrics = f", metrics at http://{server.metrics_address}/metrics" if server.metrics_address else ""
    print(f"{server.task} serving {args.protocol} at {server.target}{metrics}; Ctrl-C stops", flush=True)
    while not server.join(timeout=1.0):
        pass
    print(f"{server.task} stopped", flush=True)
    return 0


def _certs(args: argparse.Namespace) -> int:
    from .certs import write_cluster

    try:
        written = write_cluster(args.directory, _load_cluster(args.cluster), args.days)
    except FileExistsError as exc:
        raise SystemExit(f"tensorverbs certs: {exc.filename} exists; choose an empty directory") from None
    for path in written:
        print(path)
    return 0


def _tf_config(args: argparse.Namespace) -> int:
    from .resolvers import tf_configs

    for config in tf_configs(args.cluster):
        print(json.dumps(config))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import main

    return main(args.protocols, args.rounds)


def _info(args: argparse.Namespace) -> int:
    from .verbs.info import main

    return main(["--json"] if args.json else [])


def _bench(args: argparse.Namespace) -> int:
    return importlib.import_module(BENCHMARKS[args.name]).main(args.rest)


def _top(args: argparse.Namespace) -> int:
    from .metrics.top import main

    return main(args.endpoints, args.interval, args.once, args.timeout)


def parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    p = argparse.ArgumentParser(prog="tensorverbs", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("server", help="run one task of a cluster until interrupted")
    s.add_argument("--cluster", type=_cluster, help="cluster spec: a JSON file or JSON text ({job: "
                   "[host:port, ...]} or TF_CONFIG's form); default: the TF_CONFIG environment variable")
    s.add_argument("--job", required=True, help="the task's job")
    s.add_argument("--task", type=int, required=True, help="the task's index in its job")
    s.add_argument("--protocol", default="grpc", choices=list(PROTOCOLS),
                   help="how tensors move (default: %(default)s)")
    s.add_argument("--startup-grace", type=_seconds, default=60.0,
                   help="seconds a recv waits for a peer that has not started (default: %(default)s)")
    s.add_argument("--bind", help="host:port to listen on (default: the task's address)")
    s.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port "
                   "(0: a free one; default: TENSORVERBS_METRICS_PORT, else none)")
    s.set_defaults(func=_server)

    c = sub.add_parser("certs", help="make a CA and a TLS certificate for every task of a cluster")
    c.add_argument("directory", help="where to write ca.pem, ca.key and <job>-<task>.pem/.key")
    c.add_argument("--cluster", type=_cluster, help="cluster spec, as for server; default: TF_CONFIG")
    c.add_argument("--days", type=_positive, default=365, help="validity in days (default: %(default)s)")
    c.set_defaults(func=_certs)

    t = sub.add_parser("tf-config", help="print the TF_CONFIG of every task of a cluster, one JSON "
                       "line per task in the cluster's order (jobs as given, tasks by index)")
    t.add_argument("cluster", type=_cluster, help="cluster spec: a JSON file or JSON text, as for server")
    t.set_defaults(func=_tf_config)

    d = sub.add_parser("demo", help="a local cluster moving tensors with each protocol")
    d.add_argument("--protocols", type=_protocols, help=f"comma-separated, of {', '.join(PROTOCOLS)} "
                   "(default: all)")
    d.add_argument("--rounds", type=_positive, default=3,
                   help="timed rounds of each tensor, after a warm-up (default: %(default)s)")
    d.set_defaults(func=_demo)

    i = sub.add_parser("info", help="verbs providers, devices, ports and the effective configuration")
    i.add_argument("--json", action="store_true", help="print it as JSON")
    i.set_defaults(func=_info)

    b = sub.add_parser("bench", help="benchmarks (each has its own --help)")
    b.add_argument("name", choices=sorted(BENCHMARKS))
    b.add_argument("rest", nargs=argparse.REMAINDER, help="arguments of the benchmark")
    b.set_defaults(func=_bench)

    o = sub.add_parser("top", help="a live table of tasks' metrics: tensors/s, bytes/s, totals, pool use")
    o.add_argument("endpoints", nargs="+", metavar="HOST:PORT", type=_endpoint,
                   help="the tasks' metrics endpoints (or their http:// URLs)")
    o.add_argument("--interval", type=_seconds, default=2.0,
                   help="seconds between scrapes (default: %(default)s)")
    o.add_argument("--timeout", type=_seconds, default=2.0,
                   help="seconds a scrape may take (default: %(default)s)")
    o.add_argument("--once", action="store_true",
                   help="print one table, its rates over one interval, and exit (1 if an endpoint is down)")
    o.set_defaults(func=_top)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; its exit status. A mistake in the arguments is a usage error (2, as
    argparse's own), an error while running 1, each printed as one line."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return args.func(args)
    except TensorverbsError as exc:
        print(f"tensorverbs {args.command}: {exc}", file=sys.stderr)
        return USAGE if isinstance(exc, InvalidArgumentError) else FAILED
    except OSError as exc:  # the environment's: a directory that cannot be made, a file not readable
        where = f"{exc.filename}: " if exc.filename is not None else ""
        print(f"tensorverbs {args.command}: {where}{exc.strerror or exc}", file=sys.stderr)
        return FAILED


if __name__ == "__main__":
    sys.exit(main())
