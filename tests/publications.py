"""What the owners of tests/test_publication.py's publications run in their own processes
(``TaskProcess.run("publications:<function>", ...)``): each function takes the task's
Server first. Publications are kept here by their header's rkey, as an application would
keep them."""
from __future__ import annotations

import threading

import numpy as np

import tensorverbs as tv
from tensorverbs.local_cluster import pattern

#: a publication's tensors: a large one (past the bounce buffer), a small one, an odd size
SHAPES = {"weights": ((512, 1024), "float32"), "bias": ((3, 5), "int64"), "odd": ((7,), "uint8")}

_kept: dict[int, tv.Publication] = {}
_updaters: dict[int, tuple[threading.Thread, threading.Event, list[int]]] = {}
_background: dict[int, tuple[threading.Thread, list[str]]] = {}


def patterned(seed: int) -> dict[str, np.ndarray]:
    """The tensors of SHAPES, each with bytes of its own from ``seed``."""
    return {name: pattern(int(np.prod(shape)) * np.dtype(dtype).itemsize, seed * 7 + i, dtype).reshape(shape)
            for i, (name, (shape, dtype)) in enumerate(SHAPES.items())}


def filled(version: int) -> dict[str, np.ndarray]:
    """The tensors of SHAPES, every element ``tag(version)``."""
    return {name: np.full(shape, tag(version), dtype) for name, (shape, dtype) in SHAPES.items()}


def tag(version: int) -> int:
    """What every element of ``filled(version)`` holds (fits every dtype of SHAPES)."""
    return version % 251


def publish(server: tv.Server, seed: int | None, **kwargs) -> tv.PublicationRef:
    """A publication of ``patterned(seed)`` (of ``filled(version)`` for seed None)."""
    tensors = filled(kwargs.get("version", 1)) if seed is None else patterned(seed)
    publication = server.publish(tensors, **kwargs)
    _kept[publication.ref.header.rkey] = publication
    return publication.ref


def update(server: tv.Server, ref: tv.PublicationRef, seeds: list[int | None], version: int | None = None) -> int:
    """Publish one version per seed (``patterned(seed)``; ``filled`` of the version for None),
    the last one as ``version`` if given; the last version."""
    publication = _kept[ref.header.rkey]
    for i, seed in enumerate(seeds):
        given = version if i == len(seeds) - 1 else None
        number = publication.version + 1 if given is None else given
        publication.update(filled(number) if seed is None else patterned(seed), version=given)
    return publication.version


def close(server: tv.Server, ref: tv.PublicationRef) -> None:
    _kept.pop(ref.header.rkey).close()


def change_in_place(server: tv.Server, ref: tv.PublicationRef, name: str) -> None:
    """Flip a byte of ``name`` in the current version's copy, as a fault of memory would."""
    publication = _kept[ref.header.rkey]
    copy = publication._views[publication._slot][name].reshape(-1).view(np.uint8)
    copy[0] ^= 0xFF


def start_updating(server: tv.Server, ref: tv.PublicationRef) -> None:
    """Publish ``filled`` of each next version, one after the other, until stop_updating."""
    publication, stop, made = _kept[ref.header.rkey], threading.Event(), [0]

    def run() -> None:
        while not stop.is_set():
            publication.update(filled(publication.version + 1))
            made[0] += 1

    thread = threading.Thread(target=run, name="updater")
    _updaters[ref.header.rkey] = (thread, stop, made)
    thread.start()


def stop_updating(server: tv.Server, ref: tv.PublicationRef) -> int:
    """Stop start_updating's updates: how many it made."""
    thread, stop, made = _updaters.pop(ref.header.rkey)
    stop.set()
    thread.join()
    return made[0]


def update_in_background(server: tv.Server, ref: tv.PublicationRef, seeds: list[int]) -> None:
    """Start publishing ``patterned`` of each of ``seeds`` in a thread; returns at once."""
    publication, failed = _kept[ref.header.rkey], []

    def run() -> None:
        try:
            for seed in seeds:
                publication.update(patterned(seed))
        except tv.TensorverbsError as exc:
            failed.append(type(exc).__name__)

    thread = threading.Thread(target=run, name="background-updates")
    _background[ref.header.rkey] = (thread, failed)
    thread.start()


def held(server: tv.Server, ref: tv.PublicationRef) -> bool:
    """Whether an update of the publication waits for a reader's hold now."""
    return _kept[ref.header.rkey]._holding.is_set()


def release(server: tv.Server, ref: tv.PublicationRef) -> None:
    """End the readers' holds of the publication now."""
    _kept[ref.header.rkey].release()


def join_background(server: tv.Server, ref: tv.PublicationRef) -> tuple[int, str]:
    """Wait for update_in_background's updates: the version published last, and the class
    of the error that ended them ("" for none)."""
    thread, failed = _background.pop(ref.header.rkey)
    thread.join()
    return _kept[ref.header.rkey].version, "".join(failed)


def close_keeping(server: tv.Server, ref: tv.PublicationRef) -> None:
    """Close the publication, keeping it here (for join_background)."""
    _kept[ref.header.rkey].close()
