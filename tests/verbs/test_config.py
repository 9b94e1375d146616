"""RdmaConfig: both spellings of each variable, and clear errors for bad values."""
from __future__ import annotations

import pytest

from tensorverbs.errors import Code, InvalidArgumentError
from tensorverbs.verbs import RdmaConfig


def test_defaults():
    cfg = RdmaConfig.from_env({})
    assert (cfg.provider, cfg.sl, cfg.mtu, cfg.queue_depth, cfg.same_host) == \
        ("auto", 0, None, 1024, "auto")


@pytest.mark.parametrize("readme, code, field, text, value", [
    ("RDMA_QP_SL", "RDMA_SL", "sl", "5", 5),
    ("RDMA_QP_MTU", "RDMA_MTU", "mtu", "2048", 2048),
    ("RDMA_QP_QUEUE_DEPTH", "RDMA_QUEUE_DEPTH", "queue_depth", "256", 256),
    ("RDMA_QP_TIMEOUT", "RDMA_TIMEOUT", "timeout", "20", 20),
    ("RDMA_QP_RETRY_COUNT", "RDMA_RETRY_CNT", "retry_count", "3", 3),
    ("RDMA_QP_PKEY_INDEX", "RDMA_PKEY", "pkey_index", "2", 2),
])
def test_both_spellings(readme, code, field, text, value):
    assert getattr(RdmaConfig.from_env({readme: text}), field) == value
    assert getattr(RdmaConfig.from_env({code: text}), field) == value
    assert getattr(RdmaConfig.from_env({readme: text, code: text}), field) == value


def test_spellings_that_disagree_are_an_error():
    with pytest.raises(InvalidArgumentError, match="RDMA_QP_SL='1' and RDMA_SL='2' disagree"):
        RdmaConfig.from_env({"RDMA_QP_SL": "1", "RDMA_SL": "2"})


@pytest.mark.parametrize("env, words", [
    ({"RDMA_QP_SL": "9"}, ["RDMA_QP_SL", "'9'", "[0, 7]"]),
    ({"RDMA_SL": "-1"}, ["RDMA_SL", "'-1'", "[0, 7]"]),
    ({"RDMA_QP_MTU": "3000"}, ["RDMA_QP_MTU", "'3000'", "256, 512, 1024, 2048, 4096"]),
    ({"RDMA_MTU": "big"}, ["RDMA_MTU", "'big'", "256, 512"]),
    ({"RDMA_QP_QUEUE_DEPTH": "0"}, ["RDMA_QP_QUEUE_DEPTH", "'0'", "[1, 65536]"]),
    ({"TENSORVERBS_SAME_HOST": "maybe"}, ["TENSORVERBS_SAME_HOST", "'maybe'", "auto, yes, no"]),
    ({"TENSORVERBS_LINKS": "10.0.2.1,10.0.3/1"}, ["TENSORVERBS_LINKS", "comma-separated"]),
    ({"TENSORVERBS_LINKS": ",".join(["10.0.2.1"] * 9)}, ["TENSORVERBS_LINKS", "1 to 8"]),
    ({"TENSORVERBS_POOL_LIMIT": "lots"}, ["TENSORVERBS_POOL_LIMIT", "'lots'", "64MiB"]),
    ({"TENSORVERBS_PROVIDER": "magic"}, ["TENSORVERBS_PROVIDER", "'magic'", "soft, ibverbs"]),
])
def test_invalid_values_name_the_variable_the_value_and_what_is_allowed(env, words):
    with pytest.raises(InvalidArgumentError) as err:
        RdmaConfig.from_env(env)
    assert err.value.code == Code.INVALID_ARGUMENT
    for word in words:
        assert word in str(err.value)


def test_sizes_choices_and_flags():
    cfg = RdmaConfig.from_env({"TENSORVERBS_POOL_LIMIT": "1G", "TENSORVERBS_POOL_BLOCK": "64MiB",
                               "TENSORVERBS_SAME_HOST": "No", "RDMA_VERBS_VALIDATE": "1"})
    assert (cfg.pool_limit_bytes, cfg.pool_block_bytes, cfg.same_host, cfg.validate) == \
        (1 << 30, 64 << 20, "no", True)


def test_keyword_overrides_win_over_the_environment():
    assert RdmaConfig.from_env({"RDMA_QP_SL": "3"}, sl=4).sl == 4


def test_empty_values_count_as_unset():
    assert RdmaConfig.from_env({"RDMA_QP_SL": ""}).sl == 0


def test_links_are_a_list_of_addresses_the_core_gets_joined():
    cfg = RdmaConfig.from_env({"TENSORVERBS_LINKS": " 10.0.2.1, 10.0.3.1 ,"})
    assert cfg.links == ("10.0.2.1", "10.0.3.1")
    assert cfg.to_core()["links"] == "10.0.2.1,10.0.3.1"
    assert RdmaConfig.from_env({}).to_core()["links"] == ""
