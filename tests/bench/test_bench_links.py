"""``bench links``: a tensor between two hosts joined by 1 and 2 shaped links reaches the
receiver (bytes checked there), and the figures and goals reach the JSON. Timings are
never asserted."""
from __future__ import annotations

import json

import pytest

from tensorverbs import netns
from tensorverbs.bench import links


@pytest.mark.skipif(netns.unavailable_reason() is not None, reason=f"{netns.unavailable_reason()}")
def test_a_tensor_over_one_and_two_links(tmp_path):
    out = tmp_path / "links.json"
    assert links.main(["--links", "2", "1", "--rate", "500mbit", "--size", "4MiB", "--rounds", "1",
                       "--small", "2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = result["results"]
    assert [r["links"] for r in rows] == [1, 2]
    for row in rows:
        assert row["bytes"] == 4 << 20 and row["seconds"]["count"] == 1 and row["gbit_s"] > 0
        assert row["small_us"]["count"] == 2
    assert rows[0]["vs_first"] == 1.0
    assert [g["goal"] for g in result["goals"]] == ["2 links >= 1.8x one link's rate"]


def test_impossible_counts_are_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        links.main(["--links", "0"])
    assert exit_.value.code == 2
