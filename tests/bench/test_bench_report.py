"""The shared report helpers: statistics, sizes, JSON with the machine, plots."""
from __future__ import annotations

import json

import pytest

from tensorverbs.bench import report


def test_summary_and_interval():
    s = report.summarize([3.0, 1.0, 2.0, 4.0, 100.0])
    assert s["median"] == 3.0 and s["min"] == 1.0 and s["max"] == 100.0 and s["count"] == 5
    assert s["p25"] <= s["median"] <= s["p75"] <= s["p99"] <= s["max"]
    assert report.mean_ci([2.0]) == (2.0, 0.0)
    mean, ci = report.mean_ci([1.0, 3.0])
    assert mean == 2.0 and ci == pytest.approx(1.96 * 2 ** 0.5)


def test_interval_of_the_mean_and_of_a_rate():
    assert report.mean_interval([2.0]) == (2.0, 0.0)
    mean, half = report.mean_interval([1.0, 3.0])  # s = sqrt(2), n = 2: t(1) * s / sqrt(2)
    assert mean == 2.0 and half == pytest.approx(12.706, abs=1e-3)
    assert report.t_975(1000) == pytest.approx(1.962, abs=1e-3)
    rate, low, high = report.rate_interval([0.5, 0.25, 0.25])  # 3 steps in 1 s
    assert rate == 3.0 and low < 3.0 < high
    assert report.rate_interval([0.5, 0.5]) == (2.0, 2.0, 2.0)
    assert report.rate_interval([0.1, 10.0])[2] == float("inf")  # the interval reaches 0 s


def test_sizes_read_as_people_write_them():
    assert [report.human_size(n) for n in (4096, 64 << 20, 1 << 30, 1000)] == \
        ["4 KiB", "64 MiB", "1 GiB", "1000 B"]


def test_save_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "r.json", tmp_path / "r.png"

    def draw(result, path):
        report.plot(path, "t", "x", "y", {"a": ([1, 2, 4], [1.0, 2.0, 3.0]),
                                           "limit": ([1, 2, 4], [4.0, 4.0, 4.0])},
                    log=True, dashed=["limit"], errors={"a": [0.1, 0.1, 0.2]})
    assert report.save({"benchmark": "x", "value": 1}, ["x", "--y"], str(out), str(png), draw)
    data = json.loads(out.read_text())
    assert data["command"] == "tensorverbs bench x --y" and data["value"] == 1
    assert data["machine"]["cpus"] >= 1
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_save_without_matplotlib_says_so(tmp_path):
    def draw(result, path):
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
    assert not report.save({}, ["x"], str(tmp_path / "r.json"), str(tmp_path / "r.png"), draw)
    assert (tmp_path / "r.json").exists() and not (tmp_path / "r.png").exists()
