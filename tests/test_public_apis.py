"""tensorverbs uses Ray and torch through their public APIs wherever they have one: no
attribute of theirs whose name starts with "_" (dunders aside), no concurrency group of
Ray's own, but for the uses listed in NO_PUBLIC_WAY."""
from __future__ import annotations

import ast
import pathlib

import tensorverbs

PACKAGE = pathlib.Path(tensorverbs.__file__).parent
FOREIGN = ("ray", "torch")
#: private names used for want of a public way, and why
NO_PUBLIC_WAY = {
    "'_ray_system_error'": "an actor's only concurrency group that never waits behind a transfer: "
                           "asking a destination for its address elsewhere can deadlock",
    "'_ray_enable_tensor_transport'": "whether an actor was declared with enable_tensor_transport=True, "
                                      "which Ray keeps on its handle only: a call to one without it in "
                                      "the transports' concurrency groups ends its process",
    "torch.UntypedStorage._release_ipc_counter": "the only way to release the reference counter "
                                                 "of a CUDA IPC export that no receiver opened",
    "ray._private": "a worker's RDT manager (ray._private.worker.global_worker.rdt_manager), which Ray 2.60 "
                    "makes on first use without a lock: the transport makes it before an actor's first "
                    "transfer (two made at once by that transfer's threads kept its tensors from its task)",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _uses(path: pathlib.Path) -> list[str]:
    """The private names of Ray and torch ``path`` uses: attributes reached from their
    modules or from parameters annotated with their types, and "_ray..." strings."""
    tree = ast.parse(path.read_text(), str(path))
    foreign = {alias.asname or alias.name.split(".")[0]
               for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
               for alias in node.names
               if (getattr(node, "module", None) or alias.name).split(".")[0] in FOREIGN}
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            if any(part in ast.unparse(node.annotation) for part in FOREIGN):
                foreign.add(node.arg)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in foreign:
                found.append(ast.unparse(node))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_ray"):
            found.append(repr(node.value))
    return [f"{path.name}:{use}" for use in found if use not in NO_PUBLIC_WAY]


def test_ray_and_torch_are_used_through_public_apis_only():
    used = [use for path in sorted(PACKAGE.rglob("*.py")) for use in _uses(path)]
    assert used == []
