"""The job token's task proofs against whatever a caller's metadata holds (property
tests): reading the caller never raises, and names a task only for that task's own proof."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tensorverbs.rpc.auth import HEADER, TASK_HEADER, JobToken

TOKEN = JobToken("job-token-5b1d")
OTHER = JobToken("another-job-token")
keys = st.sampled_from([TASK_HEADER, HEADER, "user-agent", "tensorverbs-token-bin"])
values = st.one_of(st.text(max_size=2048), st.binary(max_size=256),
                   st.sampled_from(["/job:ps/replica:0/task:0", "/job:worker/replica:0/task:1"]))
metadata = st.lists(st.tuples(keys, values), max_size=6)


@given(metadata)
def test_any_metadata_names_no_task_or_the_one_whose_proof_it_carries(pairs):
    caller = TOKEN.caller(pairs)
    if caller is not None:
        names = [v for k, v in pairs if k == TASK_HEADER]
        proofs = [v for k, v in pairs if k == HEADER]
        assert names == [caller] and len(proofs) == 1
        assert proofs[0] in (TOKEN.proof(caller), TOKEN.proof(caller).encode())


@given(st.text(max_size=1100), metadata)
def test_a_tasks_proof_names_that_task_only_under_its_own_token(task, noise):
    noise = [(k, v) for k, v in noise if k not in (TASK_HEADER, HEADER)]
    try:
        proof = TOKEN.proof(task)
    except UnicodeEncodeError:  # (gRPC metadata values are ASCII: no such name comes)
        return
    pairs = noise + [(TASK_HEADER, task), (HEADER, proof)]
    assert TOKEN.caller(pairs) == (task if len(task) <= 1024 else None)
    assert OTHER.caller(pairs) is None
    if task:
        assert TOKEN.caller(noise + [(TASK_HEADER, task[:-1]), (HEADER, proof)]) is None
    forged = proof[:-1] + ("0" if proof[-1] != "0" else "1")
    assert TOKEN.caller(noise + [(TASK_HEADER, task), (HEADER, forged)]) is None
