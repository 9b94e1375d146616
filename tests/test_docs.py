"""Every module, and every public class and function of tensorverbs, says what it is."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import tensorverbs


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
