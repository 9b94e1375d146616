"""``bench publication``: readers race an owner that keeps updating, every read checked
whole in the readers, beside plain reads of the same bytes; the figures and the goals
reach the JSON. Timings are never asserted."""
from __future__ import annotations

import json

import pytest

from tensorverbs.bench import publication


def test_reads_racing_updates_are_whole_and_counted(tmp_path):
    out = tmp_path / "publication.json"
    assert publication.main(["--total", "1MiB", "--tensors", "5", "--readers", "2", "--reads", "40",
                             "--rounds", "2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    row, = result["results"]
    assert "error" not in row, row.get("error")
    assert row["reads"] == 2 * 40 and row["torn"] == 0 and row["updates"] > 0
    assert row["publication_reads_per_s"] > 0 and row["plain_reads_per_s"] > 0
    torn, rate = result["goals"]
    assert torn["measured"] == "0 in 80" and torn["met"] is False  # fewer reads than the goal's 10,000
    assert rate["met"] is not None


def test_mistaken_options_are_refused(capsys):
    with pytest.raises(SystemExit):
        publication.main(["--readers", "0"])
    assert "--readers" in capsys.readouterr().err
