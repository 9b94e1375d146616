"""The checked-in generated code matches the .proto files."""
from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_generated_code_is_current(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tools" / "gen_protos.py"), str(tmp_path)], check=True)
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*_pb2.py*"))
    assert generated, "protoc generated nothing"
    for rel in generated:
        checked_in = ROOT / "src" / rel
        assert checked_in.read_bytes() == (tmp_path / rel).read_bytes(), \
            f"{rel} is stale: run python tools/gen_protos.py"
