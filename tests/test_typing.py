"""The package ships its types: py.typed, and a stub of the native module that matches it."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

import tensorverbs

PACKAGE = pathlib.Path(tensorverbs.__file__).parent


def test_the_package_says_it_is_typed():
    assert (PACKAGE / "py.typed").is_file()


def test_the_native_modules_stub_matches_the_module(tmp_path):
    pytest.importorskip("nanobind", reason="nanobind's stubgen writes the stub")
    stub = tmp_path / "_core.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "tensorverbs._core", "-o", str(stub)],
                   check=True)
    assert stub.read_text() == (PACKAGE / "_core.pyi").read_text(), (
        "src/tensorverbs/_core.pyi is stale: python -m nanobind.stubgen -m tensorverbs._core "
        "-o src/tensorverbs/_core.pyi")
