"""TFConfigClusterResolver: the cluster and task of the TF_CONFIG environment variable."""
from __future__ import annotations

from typing import Any, Iterator, Mapping

from ..cluster import ClusterSpec, TaskName, tf_config_entry
from ..errors import InvalidArgumentError
from .base import ClusterResolver, environment


class TFConfigClusterResolver(ClusterResolver):
    """The job TF_CONFIG describes, as TensorFlow's resolver of that name reads it.

    TF_CONFIG is JSON: ``{"cluster": {job: [host:port, ...] or {index: host:port}},
    "task": {"type": job, "index": i}}``. A job given as a mapping is sparse (TensorFlow's
    dynamic workers: only some indices are present). ``task_type`` and ``task_id`` override
    TF_CONFIG's ``task``, which may then be absent. ``token`` is the job token of the
    server this task starts (default: the server's, TENSORVERBS_TOKEN or
    TENSORVERBS_TOKEN_FILE; without one it serves anyone).
    """

    def __init__(self, task_type: str | None = None, task_id: int | None = None, *,
                 environ: Mapping[str, str] | None = None, token: str | None = None) -> None:
        env = environment(environ)
        self._cluster = ClusterSpec.from_tf_config(env)
        if task_type is None or task_id is None:
            task = tf_config_entry("task", env)
            try:
                task_type = task_type if task_type is not None else str(task["type"])
                task_id = task_id if task_id is not None else int(task["index"])
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidArgumentError(f"TF_CONFIG's 'task' is {task!r}: expected "
                                           f"{{\"type\": job, \"index\": i}} ({exc!r})") from None
        self._cluster.resolve(TaskName(task_type, task_id))
        super().__init__(task_type, task_id, token)

    def cluster_spec(self) -> ClusterSpec:
        """TF_CONFIG's cluster."""
        return self._cluster


def tf_configs(cluster: ClusterSpec) -> Iterator[dict[str, Any]]:
    """The TF_CONFIG (as a dict, for ``json.dumps``) of every task of ``cluster``, in the
    cluster's order."""
    jobs = cluster.as_dict()
    for task in cluster.tasks():
        yield {"cluster": jobs, "task": {"type": task.job, "index": task.task}}
