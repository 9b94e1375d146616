"""The layers of docs/architecture.md hold: who includes whom in the native core, no
import cycles in the package, and protocols imported by the server alone."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
PACKAGE = ROOT / "src" / "tensorverbs"
INCLUDE = re.compile(r'^#include "([a-z_]+(?:/[a-z_]+)*)/[a-z_0-9]+\.h"', re.M)


def _includes(folder: str, recursive: bool = False) -> dict[str, set[str]]:
    """{file: the folders of the project's headers it includes} of csrc/<folder>."""
    files = (CSRC / folder).rglob("*") if recursive else (CSRC / folder).glob("*")
    return {str(f.relative_to(CSRC)): set(INCLUDE.findall(f.read_text()))
            for f in files if f.suffix in (".h", ".cc")}


def _breaking(folder: str, allowed: set[str], recursive: bool = False) -> dict[str, set[str]]:
    return {f: bad for f, inc in _includes(folder, recursive).items() if (bad := inc - allowed)}


def test_the_native_layers_include_only_downwards():
    assert _breaking("core", {"core"}) == {}
    interface = _breaking("verbs", {"core", "verbs"})
    assert interface == {"verbs/provider.cc": {"verbs/soft", "verbs/ibverbs"}}  # the registry
    assert _breaking("verbs/soft", {"core", "verbs", "verbs/soft"}) == {}
    assert _breaking("verbs/ibverbs", {"core", "verbs", "verbs/ibverbs"}) == {}
    assert _breaking("protocol", {"core", "verbs", "protocol"}) == {}
    assert _breaking("binding", {"core", "verbs", "verbs/ibverbs", "verbs/soft", "protocol", "binding"}) == {}
    for folder in ("core", "verbs", "protocol"):
        assert all("binding" not in inc for inc in _includes(folder, recursive=True).values())


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(("tensorverbs", *path.relative_to(PACKAGE).with_suffix("").parts))
        modules[name.removesuffix(".__init__")] = path
    modules["tensorverbs._core"] = PACKAGE / "_core.pyi"
    return modules


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, imports for type checking included."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if path.suffix == ".pyi":
            graph[name] = set()
            continue
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = (package[:len(package) - node.level + 1] if node.level else []) + \
                    (node.module.split(".") if node.module else [])
                subs = {".".join(base + [a.name]) for a in node.names} & modules.keys()
                found |= subs if len(subs) == len(node.names) else subs | {".".join(base)}
        graph[name] = (found & modules.keys()) - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (its modules in order), None if there is none."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles_in_the_package():
    assert _cycle(_imports(_modules())) is None


def test_protocols_are_imported_by_the_server_alone():
    graph = _imports(_modules())
    protocols = {"tensorverbs.rpc.grpc_rendezvous", "tensorverbs.verbs.rendezvous"}
    assert {m for m, imported in graph.items() if imported & protocols} == set()  # by name only
    import tensorverbs.server as server
    assert {p.split(":")[0] for p in server.PROTOCOLS.values()} == protocols
    for name, imported in graph.items():
        if name.startswith("tensorverbs.rendezvous."):
            assert "tensorverbs.server" not in imported and not imported & protocols, name


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
