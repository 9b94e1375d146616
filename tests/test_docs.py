"""Every module, and every public class and function of tensorverbs, says what it is; the
README gives every counter of ``stats()`` and every command."""
from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import tensorverbs
from tensorverbs import cli
from tensorverbs.local_cluster import cluster_spec


#: optional dependencies (extras): a module needing one that is not installed is skipped
OPTIONAL = {"ray"}


def _modules():
    for info in pkgutil.walk_packages(tensorverbs.__path__, "tensorverbs."):
        if not info.name.endswith("_pb2") and info.name != "tensorverbs.__main__":
            try:
                yield importlib.import_module(info.name)
            except ModuleNotFoundError as exc:
                if (exc.name or "").split(".")[0] not in OPTIONAL:
                    raise


def test_public_objects_have_docstrings():
    missing = []
    for module in _modules():
        if not (module.__doc__ or "").strip():
            missing.append(module.__name__)
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(obj) or inspect.isfunction(obj):
                if not (obj.__doc__ or "").strip():
                    missing.append(f"{module.__name__}.{name}")
    assert not missing, "no docstring: " + ", ".join(missing)


def _readme_section(start: str, end: str) -> str:
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = text[text.index(start):]
    return section[:section.index(end, len(start))]


def test_the_readme_gives_the_counters_of_stats():
    common, verbs = _readme_section("Counters: ", "\n\n").split("with `grpc+verbs` also")
    names = {"grpc": set(re.findall(r"`(\w+)`", common))}
    names["grpc+verbs"] = names["grpc"] | set(re.findall(r"`(\w+)`", verbs))
    cluster = cluster_spec({"ps": 1})
    for protocol, documented in names.items():
        with tensorverbs.Server(cluster, "ps", 0, protocol) as server:
            counters = set(server.stats())
        assert sorted(counters - documented) == [], f"{protocol}: counters the README does not give"
        # what the paragraph names besides counters are the Server's calls
        assert sorted(n for n in documented - counters if not hasattr(tensorverbs.Server, n)) == [], \
            f"{protocol}: the README gives counters stats() does not have"


def test_the_readme_lists_every_command_and_benchmark():
    section = _readme_section("## Command line", "\n## ")
    commands = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert [c for c in commands if f"tensorverbs {c}" not in section] == []
    benchmarks = next(line for line in section.splitlines() if "tensorverbs bench" in line)
    assert [b for b in cli.BENCHMARKS if not re.search(rf"\b{b}\b", benchmarks)] == []
