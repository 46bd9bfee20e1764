"""Which cluster this trainer process is part of, read from `TF_CONFIG` or Vertex AI's `CLUSTER_SPEC`.

    >>> cluster = cluster_from_env(os.environ)      # None on a single machine
    >>> cluster.multi_worker, cluster.is_chief, cluster.tf_config

Vertex AI sets `CLUSTER_SPEC` for every custom job (pools `workerpool0..3`) and `TF_CONFIG` for
TensorFlow images; Cloud ML Engine's `TF_CONFIG` named the chief `master`. All of them come out as one
`TF_CONFIG` for `MultiWorkerMirroredStrategy`: the chief and the workers train, parameter servers and
evaluators have nothing to do in a synchronous all-reduce job (their task exits at once, saying so).
Pure functions of the environment: no TensorFlow here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

#: Vertex AI's pool names in CLUSTER_SPEC, in order, and what TensorFlow calls them.
VERTEX_POOLS = {"workerpool0": "chief", "workerpool1": "worker", "workerpool2": "ps", "workerpool3": "evaluator"}
#: Cloud ML Engine (and TF 1.x estimators) called the chief "master".
LEGACY_NAMES = {"master": "chief"}
TRAINING_ROLES = ("chief", "worker")


class ClusterError(ValueError):
    """TF_CONFIG / CLUSTER_SPEC is present but not a cluster description."""


@dataclass(frozen=True)
class Cluster:
    """This task's place in the cluster, with the TF_CONFIG that MultiWorkerMirroredStrategy reads."""

    task_type: str
    task_index: int
    hosts: dict[str, list[str]]  # training roles only: chief, worker
    source: str  # the environment variable it came from

    @property
    def trains(self) -> bool:
        """True for the roles that train (chief, worker); evaluators and parameter servers do not."""
        return self.task_type in TRAINING_ROLES

    @property
    def workers(self) -> int:
        """How many machines train: the chief and the workers."""
        return sum(len(v) for v in self.hosts.values())

    @property
    def multi_worker(self) -> bool:
        """True when this task trains alongside other machines."""
        return self.trains and self.workers > 1

    @property
    def is_chief(self) -> bool:
        """The chief, or worker 0 when there is no chief (TensorFlow's own rule)."""
        if "chief" in self.hosts:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def worker_id(self) -> int:
        """0 for the chief, then the workers: a stable number for per-worker paths and logs."""
        offset = len(self.hosts.get("chief", [])) if self.task_type == "worker" else 0
        return offset + self.task_index

    @property
    def tf_config(self) -> dict[str, Any]:
        """The cluster as `TF_CONFIG` for MultiWorkerMirroredStrategy: training roles only."""
        return {"cluster": self.hosts, "task": {"type": self.task_type, "index": self.task_index}}


def cluster_from_env(env: Mapping[str, str]) -> Cluster | None:
    """Pure decision: the cluster described by `TF_CONFIG` (preferred) or `CLUSTER_SPEC`, or None."""
    for name in ("TF_CONFIG", "CLUSTER_SPEC"):
        text = env.get(name, "").strip()
        if not text:
            continue
        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ClusterError(f"{name} is not JSON ({exc.msg} at character {exc.pos})") from None
        if not isinstance(config, dict):
            raise ClusterError(f"{name}: expected a JSON object with 'cluster' and 'task'")
        if not config.get("cluster"):
            return None  # an empty cluster is one machine, as TensorFlow reads it
        if not isinstance(config["cluster"], dict):
            raise ClusterError(f"{name}: cluster = {config['cluster']!r}: expected an object of role -> host list")
        return _parse(name, config)
    return None


def _role(name: str, raw: str) -> str:
    role = VERTEX_POOLS.get(raw, LEGACY_NAMES.get(raw, raw))
    if role not in ("chief", "worker", "ps", "evaluator"):
        raise ClusterError(f"{name}: task type {raw!r}: expected chief, worker, ps, evaluator, master or workerpool0-3")
    return role


def _parse(name: str, config: dict[str, Any]) -> Cluster:
    hosts: dict[str, list[str]] = {}
    for raw, addresses in config["cluster"].items():
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise ClusterError(f"{name}: cluster.{raw} = {addresses!r}: expected a list of host:port")
        role = _role(name, raw)
        if role in TRAINING_ROLES and addresses:
            hosts.setdefault(role, []).extend(addresses)
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task:
        raise ClusterError(f"{name}: expected a 'task' object with 'type' and 'index'")
    try:
        index = int(task.get("index", 0))
    except (TypeError, ValueError):
        raise ClusterError(f"{name}: task.index = {task.get('index')!r}: expected a number") from None
    role = _role(name, str(task["type"]))
    if role in TRAINING_ROLES and index >= len(hosts.get(role, [])):
        raise ClusterError(
            f"{name}: task {role}:{index} is not in the cluster ({len(hosts.get(role, []))} {role} hosts)"
        )
    if len(hosts.get("chief", [])) > 1:
        raise ClusterError(f"{name}: {len(hosts['chief'])} chiefs: expected one")
    return Cluster(role, index, hosts, name)
