"""What a task's child process raises reaches its parent as an error, never as the
parent's own interrupt or exit: a KeyboardInterrupt that a test's signal raised in the
child at an unexpected moment had stopped the whole test run."""
from __future__ import annotations

import pytest

from tensorverbs.local_cluster import TaskProcess, cluster_spec


@pytest.mark.parametrize("raised", ["KeyboardInterrupt", "SystemExit"])
def test_a_childs_interrupt_or_exit_is_an_error_in_its_parent(raised):
    task = TaskProcess(cluster_spec({"ps": 1}), "ps", 0, "grpc")
    try:
        with pytest.raises(RuntimeError, match=f"(?m)^{raised}$") as caught:
            task.call("run", "interrupting:raise_named", raised)
        assert "raise_named" in str(caught.value), "the child's traceback is missing"
        assert task.call("run", "interrupting:raise_named", None) is None, "the child ended"
    finally:
        task.stop()
