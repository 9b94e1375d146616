"""Regenerate the checked-in Python code of the .proto files (needs grpcio-tools).

Only messages are generated: the service's client and server are built from the
service descriptor with serializers of their own (see tensorverbs.rpc.service).

    python tools/gen_protos.py [OUT_DIR]

Without OUT_DIR it writes next to the .proto files; tests call it with a temporary
directory and compare, so the checked-in code cannot drift from the .proto files.
"""
from __future__ import annotations

import pathlib
import sys

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
PROTOS = ["tensorverbs/rpc/tensor.proto", "tensorverbs/rpc/tensorverbs.proto"]


def generate(out_dir: pathlib.Path) -> None:
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    for proto in PROTOS:
        args = ["protoc", f"-I{SRC}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", proto]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {proto}")


if __name__ == "__main__":
    generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else SRC)
