"""Every ```python example of README.md runs as it is written, so that none drifts from
the code.

How an example runs:

* A line ``# in the J process`` (``# in each J process``) starts the code of a process;
  the lines before the first such line are every process's too. Each process runs as a
  ``python -c`` of its own, all of an example's at once, and each must exit with status 0.
  A process ``in each J process`` runs once per task of job J in the example's
  ``tv.ClusterSpec({...})``, its task index as ``sys.argv[1]``. An example without such a
  line is one process.
* Every ``127.0.0.1:PORT`` of an example is replaced by a free port of this machine (the
  same port for the same address), so that examples and other tests do not collide.
* An example that cannot run here is marked right before its block with an HTML comment
  ``<!-- not run: REASON -->``, REASON one of :data:`NOT_RUN`.
"""
from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tensorverbs.local_cluster import free_port

README = Path(__file__).resolve().parents[1] / "README.md"
#: why an example may be left out, and which examples are
NOT_RUN = {
    "needs a launched task's TF_CONFIG": 1,
    "needs Slurm": 1,
    "needs torchrun": 1,
    "needs a Ray cluster (tests/on_ray run it)": 3,
}
_BLOCK = re.compile(r"(?:<!-- not run: (?P<reason>[^>]*?) -->\n)?```python\n(?P<code>.*?)^```$", re.S | re.M)
_PROCESS = re.compile(r"^# in (?P<each>the|each) (?P<job>[\w-]+) process\b.*$", re.M)
_ADDRESS = re.compile(r"127\.0\.0\.1:\d+")
_CLUSTER = re.compile(r"tv\.ClusterSpec\((\{.*?\})\)", re.S)
#: seconds an example's processes may take, all together
TIMEOUT = 240


@dataclass(frozen=True)
class Example:
    """A ```python block of the README: its first line's number, its code, and why it is
    not run (None: it runs)."""

    line: int
    code: str
    not_run: str | None

    def processes(self) -> list[tuple[str, str, list[str]]]:
        """(name, code, arguments) of each process the example runs, on free ports."""
        ports: dict[str, str] = {}
        code = _ADDRESS.sub(lambda m: ports.setdefault(m[0], f"127.0.0.1:{free_port()}"), self.code)
        headers = list(_PROCESS.finditer(code))
        if not headers:
            return [("the process", code, [])]
        shared = code[:headers[0].start()]
        out = []
        for header, following in zip(headers, [*headers[1:], None]):
            body = shared + code[header.start():following.start() if following else len(code)]
            if header["each"] == "each":
                tasks = ast.literal_eval(_CLUSTER.search(code)[1])[header["job"]]
                out += [(f"{header['job']} process {i}", body, [str(i)]) for i in range(len(tasks))]
            else:
                out.append((f"the {header['job']} process", body, []))
        return out


def examples() -> list[Example]:
    text = README.read_text(encoding="utf-8")
    return [Example(text.count("\n", 0, m.start("code")) + 1, m["code"], m["reason"])
            for m in _BLOCK.finditer(text)]


def test_every_example_runs_or_says_why_not():
    reasons: dict[str, int] = {}
    for example in examples():
        if example.not_run is not None:
            reasons[example.not_run] = reasons.get(example.not_run, 0) + 1
    assert reasons == NOT_RUN
    assert len(examples()) > sum(NOT_RUN.values())


@pytest.mark.parametrize("example", [e for e in examples() if e.not_run is None],
                         ids=lambda e: f"README.md:{e.line}")
def test_example_runs(example, tmp_path):
    for module in ("torch",):
        if re.search(rf"^import {module}\b", example.code, re.M) and importlib.util.find_spec(module) is None:
            pytest.skip(f"the example needs {module}")
    running = [(name, subprocess.Popen([sys.executable, "-c", code, *argv], cwd=tmp_path, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE))
               for name, code, argv in example.processes()]
    failed = []
    for name, process in running:
        try:
            out, err = process.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for _, other in running:
                other.kill()
            out, err = process.communicate()
        if process.returncode != 0:
            failed.append(f"{name} (exit status {process.returncode}):\n{err[-3000:]}")
    assert not failed, f"README.md:{example.line}: " + "\n".join(failed)
