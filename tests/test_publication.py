"""Publications: a task publishes a set of tensors under versions; other tasks read it
one-sided, always one whole version, never a mix of two, while the owner updates it
(seqlock over two copies: tensorverbs/one_sided/publication.py). The owner runs in a
process of its own (tests/publications.py); bytes are compared."""
from __future__ import annotations

import asyncio
import pickle
import time

import numpy as np
import pytest

import publications
import tensorverbs as tv
from one_sided_pairs import ONE_SIDED_VARIANTS, WAIT
from tensorverbs.local_cluster import cluster_spec, same
from tensorverbs.one_sided import publication_reads
from variants import pair_of


@pytest.fixture(scope="module", params=ONE_SIDED_VARIANTS)
def pair(request):
    yield from pair_of(request.param)


def whole(got: tv.Published, expected: dict[str, np.ndarray]) -> bool:
    return got.tensors.keys() == expected.keys() and all(
        got.tensors[name].dtype == array.dtype and same(got.tensors[name], array) for name, array in expected.items())


def test_a_reader_gets_each_version_the_owner_publishes(pair):
    ref = pair.ps.run("publications:publish", 1, version=5)
    assert pickle.loads(pickle.dumps(ref)) == ref
    got = pair.worker.read_publication(ref, timeout=WAIT)
    assert got.version == 5 and whole(got, publications.patterned(1))
    assert pair.ps.run("publications:update", ref, [2]) == 6
    got = pair.worker.read_publication(ref, timeout=WAIT)
    assert got.version == 6 and whole(got, publications.patterned(2))
    assert pair.ps.run("publications:update", ref, [3], version=40) == 40
    out = {"weights": np.zeros((512, 1024), np.float32)}
    got = pair.worker.read_publication(ref, out=out, timeout=WAIT)
    assert got.version == 40 and got.tensors["weights"] is out["weights"] and whole(got, publications.patterned(3))
    pair.ps.run("publications:close", ref)
    with pytest.raises(tv.NotFoundError):
        pair.worker.read_publication(ref, timeout=WAIT)


class _UpdatedAfterTheHeader:
    """A reader's one-sided access through which the owner publishes ``seeds``' versions
    right after the first read of the header, before the tensors are read."""

    def __init__(self, pair, ref: tv.PublicationRef, seeds: list[int]) -> None:
        self._pair, self._ref, self._seeds, self._inner = pair, ref, seeds, pair.worker._one_sided

    def read_words(self, *args):
        words = self._inner.read_words(*args)
        if self._seeds:
            seeds, self._seeds = self._seeds, []
            self._pair.ps.run("publications:update", self._ref, seeds)
        return words

    def read_bytes(self, *args):
        return self._inner.read_bytes(*args)

    def hold_publication(self, *args):
        return self._inner.hold_publication(*args)


def _read_racing(pair, ref: tv.PublicationRef, seeds: list[int]) -> tuple[tv.Published, int]:
    """A read of ``ref`` that ``seeds``' updates race: what it got, and how often it read again."""
    counters = pair.worker._rt.counters
    before = counters.snapshot()["publication_rereads"]
    got = publication_reads.read(_UpdatedAfterTheHeader(pair, ref, seeds), counters, ref, None, WAIT, None)
    return got, counters.snapshot()["publication_rereads"] - before


def test_a_read_that_one_update_overlaps_gets_the_version_it_started_on(pair):
    ref = pair.ps.run("publications:publish", 10, grace=0)
    got, rereads = _read_racing(pair, ref, [11])
    assert got.version == 1 and whole(got, publications.patterned(10)) and rereads == 0
    pair.ps.run("publications:close", ref)


def test_a_read_whose_copy_the_owner_overwrote_reads_again_and_gets_one_version(pair):
    """Two updates while a read runs: the second overwrites the copy being read; the read
    must not return the first version with the third's bytes."""
    ref = pair.ps.run("publications:publish", 20, grace=0)
    got, rereads = _read_racing(pair, ref, [21, 22])
    assert got.version == 3 and whole(got, publications.patterned(22)) and rereads == 1
    pair.ps.run("publications:close", ref)


class _OverwrittenTwice:
    """A reader's one-sided access through which the owner overwrites what the first read
    reads (two updates right after the header), then starts two more updates in the
    background right after the second read's header, and waits until they are held."""

    def __init__(self, pair, ref: tv.PublicationRef) -> None:
        self._pair, self._ref, self._inner, self.headers = pair, ref, pair.worker._one_sided, 0

    def read_words(self, *args):
        words = self._inner.read_words(*args)
        if len(words) == 3:  # a header
            self.headers += 1
            if self.headers == 1:
                self._pair.ps.run("publications:update", self._ref, [81, 82])
            elif self.headers == 2:
                self._pair.ps.run("publications:update_in_background", self._ref, [83, 84])
                deadline = time.monotonic() + WAIT
                while not self._pair.ps.run("publications:held", self._ref):  # a condition, polled
                    assert time.monotonic() < deadline, "the owner's updates were not held"
        return words

    def read_bytes(self, *args):
        return self._inner.read_bytes(*args)

    def hold_publication(self, *args):
        return self._inner.hold_publication(*args)


def test_a_reader_whose_read_was_overwritten_holds_the_owners_updates_for_its_next(pair, monkeypatch):
    """An owner that overwrites every read would starve its readers: a reader that had to
    read again holds the owner's updates (HoldPublication) until its next read is done."""
    monkeypatch.setattr(publication_reads, "HOLD_MARGIN", 60.0)  # the longest hold: the test ends it
    ref = pair.ps.run("publications:publish", 80, grace=0)
    counters = pair.worker._rt.counters
    before = counters.snapshot()["publication_rereads"]
    reader = _OverwrittenTwice(pair, ref)
    got = publication_reads.read(reader, counters, ref, None, WAIT, None)
    assert got.version == 3 and whole(got, publications.patterned(82)) and reader.headers == 2
    assert counters.snapshot()["publication_rereads"] - before == 1
    pair.ps.run("publications:release", ref)
    assert pair.ps.run("publications:join_background", ref) == (5, "")  # published once released
    pair.ps.run("publications:close", ref)


def test_closing_a_publication_fails_an_update_that_waits_for_a_hold(pair):
    ref = pair.ps.run("publications:publish", 85, grace=0)
    pair.worker._one_sided.hold_publication(ref, 60.0, WAIT)  # (held 10 s at most)
    pair.ps.run("publications:update_in_background", ref, [86])
    deadline = time.monotonic() + WAIT
    while not pair.ps.run("publications:held", ref):  # a condition, polled
        assert time.monotonic() < deadline, "the update was not held"
    pair.ps.run("publications:close_keeping", ref)
    assert pair.ps.run("publications:join_background", ref) == (1, "NotFoundError")


class _HeaderReadInTwo:
    """A reader's one-sided access whose first read of the header reads its first word,
    then lets the owner publish two versions, then reads the others: the header's words
    are read in one go, never at one instant."""

    def __init__(self, pair, ref: tv.PublicationRef) -> None:
        self._pair, self._ref, self._inner, self._first = pair, ref, pair.worker._one_sided, True

    def read_words(self, buffer, first, count, *args):
        if count == 3 and self._first:
            self._first = False
            words = self._inner.read_words(buffer, first, 1, *args)
            self._pair.ps.run("publications:update", self._ref, [92, 93])
            return words + self._inner.read_words(buffer, first + 1, 2, *args)
        return self._inner.read_words(buffer, first, count, *args)

    def read_bytes(self, *args):
        return self._inner.read_bytes(*args)

    def hold_publication(self, *args):
        return self._inner.hold_publication(*args)


def test_a_header_read_across_two_updates_still_gives_the_version_of_the_bytes(pair):
    """The header's current word said version 1 in slot 0; by its sequence word, slot 0 held
    version 3: the read must say 3, the version of the bytes it returns."""
    ref = pair.ps.run("publications:publish", 91, grace=0)
    got = publication_reads.read(_HeaderReadInTwo(pair, ref), pair.worker._rt.counters, ref, None, WAIT, None)
    assert got.version == 3 and whole(got, publications.patterned(93))
    pair.ps.run("publications:close", ref)


def test_a_hold_of_a_closed_publication_is_refused(pair):
    ref = pair.ps.run("publications:publish", 90)
    pair.worker._one_sided.hold_publication(ref, 0.0, WAIT)
    pair.ps.run("publications:close", ref)
    with pytest.raises(tv.NotFoundError, match="no such publication"):
        pair.worker._one_sided.hold_publication(ref, 0.0, WAIT)


def test_reads_racing_an_owner_that_keeps_updating_never_mix_versions(pair):
    ref = pair.ps.run("publications:publish", None)
    pair.ps.run("publications:start_updating", ref)
    try:
        versions: list[int] = []
        deadline = time.monotonic() + WAIT
        while len(versions) < 150 or len(set(versions)) < 3:  # until reads saw the owner update
            assert time.monotonic() < deadline, f"{len(set(versions))} versions in {len(versions)} reads"
            got = pair.worker.read_publication(ref, timeout=WAIT)
            torn = [name for name, array in got.tensors.items() if not (array == publications.tag(got.version)).all()]
            assert torn == [], f"version {got.version}: {torn} hold another version's bytes"
            versions.append(got.version)
        assert versions == sorted(versions)
    finally:
        pair.ps.run("publications:stop_updating", ref)
    pair.ps.run("publications:close", ref)


def test_checksums_find_bytes_that_changed_without_an_update(pair):
    ref = pair.ps.run("publications:publish", 30, checksums=True)
    assert whole(pair.worker.read_publication(ref, timeout=WAIT), publications.patterned(30))
    pair.ps.run("publications:change_in_place", ref, "bias")
    with pytest.raises(tv.DataLossError, match="'bias'.*version 1.*checksum"):
        pair.worker.read_publication(ref, timeout=WAIT)
    pair.ps.run("publications:close", ref)


def test_asyncio_reads_a_publication(pair):
    ref = pair.ps.run("publications:publish", 40)
    got = asyncio.run(pair.worker.aread_publication(ref, timeout=WAIT))
    assert got.version == 1 and whole(got, publications.patterned(40))
    pair.ps.run("publications:close", ref)


def test_a_task_reads_its_own_publication(pair):
    tensors = publications.patterned(50)
    with pair.worker.publish(tensors) as publication:
        assert whole(pair.worker.read_publication(publication, timeout=WAIT), tensors)
        assert publication.update(publications.patterned(51)) == 2
        got = pair.worker.read_publication(publication.ref, timeout=WAIT)
        assert got.version == 2 and whole(got, publications.patterned(51))
    with pytest.raises(tv.NotFoundError, match="closed"):
        publication.update(tensors)


def test_strided_tensors_and_either_byte_order_are_published_as_their_values(pair):
    tensors = {"big": np.arange(5, dtype=">f4"), "strided": np.arange(12.0).reshape(3, 4).T}
    with pair.worker.publish(tensors) as publication:
        got = pair.worker.read_publication(publication, timeout=WAIT)
        assert got.tensors["big"].dtype == np.float32 and (got.tensors["big"] == np.arange(5)).all()
        assert (got.tensors["strided"] == tensors["strided"]).all()


def test_a_publication_ends_with_its_server(pair):
    with tv.Server(cluster_spec({"solo": 1}), "solo", 0, pair.protocol) as solo:
        publication = solo.publish(publications.patterned(95))
    with pytest.raises(tv.NotFoundError, match="closed"):
        publication.update(publications.patterned(96))


def test_mistakes_are_named(pair):
    tensors = publications.patterned(60)
    with pytest.raises(tv.InvalidArgumentError, match="mapping"):
        pair.worker.publish([np.zeros(3)])
    with pytest.raises(tv.InvalidArgumentError, match="non-empty mapping"):
        pair.worker.publish({})
    with pytest.raises(tv.InvalidArgumentError, match="version"):
        pair.worker.publish(tensors, version=0)
    with pytest.raises(tv.InvalidArgumentError, match="grace is 61: expected at most 60"):
        pair.worker.publish(tensors, grace=61)
    with pair.worker.publish(tensors, version=3) as publication:
        with pytest.raises(tv.InvalidArgumentError, match="missing \\['odd'\\], unknown \\['other'\\]"):
            publication.update({**{k: v for k, v in tensors.items() if k != "odd"}, "other": np.zeros(3)})
        with pytest.raises(tv.InvalidArgumentError, match="'bias' is int32"):
            publication.update({**tensors, "bias": tensors["bias"].astype(np.int32)})
        with pytest.raises(tv.InvalidArgumentError, match="greater than the current version 3"):
            publication.update(tensors, version=3)
        with pytest.raises(tv.InvalidArgumentError, match="does not hold.*'nope'"):
            pair.worker.read_publication(publication, out={"nope": np.zeros(3)}, timeout=WAIT)
        with pytest.raises(tv.InvalidArgumentError, match="'odd'"):
            pair.worker.read_publication(publication, out={"odd": np.zeros(8, np.uint8)}, timeout=WAIT)
        with pytest.raises(tv.InvalidArgumentError, match="Publication or its ref"):
            pair.worker.read_publication(publication.ref.header, timeout=WAIT)
        assert publication.version == 3
