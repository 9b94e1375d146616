"""ClusterSpec, task names and rendezvous keys."""
from __future__ import annotations

import json

import pytest

import tensorverbs as tv


def test_cluster_spec_and_addresses():
    spec = tv.ClusterSpec({"ps": ["h0:1"], "worker": ["h1:2", "h2:3"]})
    assert spec.jobs == ["ps", "worker"]
    assert spec.address("/job:worker/task:1") == "h2:3"
    assert spec.address("/job:worker/replica:0/task:0") == "h1:2"
    assert [str(t) for t in spec.tasks()] == [
        "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"]
    assert tv.ClusterSpec(spec.as_dict()) == spec
    sparse = tv.ClusterSpec({"worker": {0: "a:1", 5: "b:2"}})
    assert sparse.address("/job:worker/task:5") == "b:2"
    assert sparse.as_dict() == {"worker": {0: "a:1", 5: "b:2"}}
    # TF_CONFIG's JSON gives task indices as strings, in any order
    dense = tv.ClusterSpec({"worker": {str(i): f"h{i}:1" for i in (10, 2, *range(10), 1)}})
    assert dense.as_dict() == {"worker": [f"h{i}:1" for i in range(11)]}


@pytest.mark.parametrize("bad", [{}, {"ps": ["nohostport"]}, {"bad job": ["h:1"]}, {"ps": [3]},
                                 {"ps": {"first": "h:1"}}])
def test_bad_cluster_specs(bad):
    with pytest.raises(tv.InvalidArgumentError):
        tv.ClusterSpec(bad)


def test_a_cluster_spec_grows():
    spec = tv.ClusterSpec({"worker": ["h0:1"]})
    assert spec.add_task("worker", 2, "h2:1") and spec.add_task("worker", 1, "h1:1")
    assert spec.add_task("ps", 0, "p:1")
    assert not spec.add_task("worker", 1, "h1:1")  # known at that address: nothing changes
    assert spec.as_dict() == {"worker": ["h0:1", "h1:1", "h2:1"], "ps": ["p:1"]}
    with pytest.raises(tv.InvalidArgumentError, match="is at h1:1 already, not at h9:1"):
        spec.add_task("worker", 1, "h9:1")
    for job, index, address in [("bad job", 0, "h:1"), ("ps", 1, "nohostport"), ("ps", -1, "h:1")]:
        with pytest.raises(tv.InvalidArgumentError):
            spec.add_task(job, index, address)
    assert len(list(spec.tasks())) == 4


def test_from_tf_config():
    env = {"TF_CONFIG": json.dumps({"cluster": {"ps": ["a:1"], "worker": ["b:2"]},
                                    "task": {"type": "worker", "index": 0}})}
    assert tv.ClusterSpec.from_tf_config(env).address("/job:ps/task:0") == "a:1"
    with pytest.raises(tv.InvalidArgumentError, match="TF_CONFIG"):
        tv.ClusterSpec.from_tf_config({})
    with pytest.raises(tv.InvalidArgumentError, match="TF_CONFIG"):
        tv.ClusterSpec.from_tf_config({"TF_CONFIG": "{not json"})


def test_task_names_long_and_short():
    assert tv.parse_task("/job:ps/task:0") == tv.parse_task("/job:ps/replica:0/task:0")
    assert str(tv.parse_task("/job:ps/task:3")) == "/job:ps/replica:0/task:3"
    assert tv.parse_task("/job:ps/replica:0/task:0/device:CPU:0").task == 0
    for bad in ["ps:0", "/job:ps", "/job:/task:0", "/job:ps/task:x", "job:ps/task:0"]:
        with pytest.raises(tv.InvalidArgumentError, match="malformed task name"):
            tv.parse_task(bad)


def test_rendezvous_key_format_and_parse():
    key = tv.RendezvousKey(tv.parse_task("/job:ps/task:0"), 123456789,
                           tv.parse_task("/job:worker/task:1"), "w1", 2, 7)
    text = tv.format_key(key)
    assert text == ("/job:ps/replica:0/task:0/device:CPU:0;00000000075bcd15;"
                    "/job:worker/replica:0/task:1/device:CPU:0;w1;2:7")
    assert tv.parse_key(text) == key
    for bad in ["a;b;c", text.replace(";2:7", ";x:7"), text.replace("075bcd15", "zz"),
                text.replace(";w1;", ";;")]:
        with pytest.raises(tv.InvalidArgumentError):
            tv.parse_key(bad)


def test_errors_carry_codes_and_pickle():
    import pickle

    err = tv.AbortedError("step 3 was aborted")
    assert err.code == tv.Code.ABORTED and "step 3" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is tv.AbortedError and again.message == err.message
    assert isinstance(tv.errors.from_code(14, "x"), tv.UnavailableError)
    assert tv.errors.from_code(99, "odd").code == tv.Code.UNKNOWN


@pytest.mark.parametrize("address", ["h:65536", "h:99999", "h:-1", "h:"])
def test_a_port_out_of_range_is_refused(address):
    with pytest.raises(tv.InvalidArgumentError, match="worker.*task:0"):
        tv.ClusterSpec({"worker": [address]})
    with pytest.raises(tv.InvalidArgumentError, match="worker.*task:1"):
        tv.ClusterSpec({"worker": ["h:1"]}).add_task("worker", 1, address)


def test_ports_in_range_are_taken():
    spec = tv.ClusterSpec({"worker": ["h:0", "h:65535", "[::1]:1"]})
    assert spec.address("/job:worker/task:1") == "h:65535"


def test_two_tasks_at_one_address_are_refused():
    with pytest.raises(tv.InvalidArgumentError, match=(
            r"/job:ps/replica:0/task:0 at h:2222 and /job:worker/replica:0/task:1 at H:2222 share an address")):
        tv.ClusterSpec({"ps": ["h:2222"], "worker": ["h:1", "H:2222"]})
    with pytest.raises(tv.InvalidArgumentError, match="share an address"):
        tv.ClusterSpec({"worker": {0: "h:1", 3: "h:1"}})
    # port 0: each task is given a free port as it starts
    assert tv.ClusterSpec({"ps": ["h:0"], "worker": ["h:0"]}).address("/job:worker/task:0") == "h:0"
    # the same port on two hosts
    assert tv.ClusterSpec({"ps": ["a:1"], "worker": ["b:1"]})


def test_a_copy_keeps_what_add_task_added():
    """A task that joins may take the address a task gone from the job had (add_task does
    not refuse it), and a copy of the spec keeps it."""
    spec = tv.ClusterSpec({"worker": ["h:1"]})
    spec.add_task("worker", 1, "h:1")
    assert tv.ClusterSpec(spec) == spec


def test_a_server_s_bind_address_is_checked():
    with pytest.raises(tv.InvalidArgumentError, match="bind_address.*99999"):
        tv.Server({"ps": ["127.0.0.1:0"]}, "ps", 0, bind_address="127.0.0.1:99999")
    with pytest.raises(tv.InvalidArgumentError, match="bind_address.*host:port"):
        tv.Server({"ps": ["127.0.0.1:0"]}, "ps", 0, bind_address="127.0.0.1")
