"""Beyond one machine: the built-in trainer on MultiWorkerMirroredStrategy from TF_CONFIG / CLUSTER_SPEC.

The two-worker tests run real TensorFlow workers on 127.0.0.1 ports: one of them is preempted through
its own metadata server (instance/preempted TRUE), every worker saves at the same step and exits for a
restart, and the restarted job ends bit for bit where an uninterrupted one does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from survivor.local.http import free_port, free_ports
from survivor.local.metadata_server import MetadataServer
from survivor.trainers.cluster import ClusterError, cluster_from_env
from survivor.trainers.contract import StopRequest
from survivor.metadata import MetadataClient
from survivor.trainers.loop import RESTART_EXIT_CODE
from survivor.retry import once
from survivor.trainers.preemption import NoticePoll
from tests.tf_resume import assert_bitwise_equal, checkpoint_values
from tests.waiting import wait_until

# -- reading the cluster (pure) -------------------------------------------------------------------


def test_no_cluster_is_one_machine():
    assert cluster_from_env({}) is None
    assert cluster_from_env({"TF_CONFIG": ""}) is None
    assert cluster_from_env({"TF_CONFIG": json.dumps({"cluster": {}, "task": {}})}) is None


def test_tf_config_with_chief_and_workers():
    env = {
        "TF_CONFIG": json.dumps(
            {
                "cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]},
                "task": {"type": "worker", "index": 1},
            }
        )
    }
    cluster = cluster_from_env(env)
    assert (cluster.task_type, cluster.task_index, cluster.workers) == ("worker", 1, 3)
    assert cluster.multi_worker and not cluster.is_chief and cluster.worker_id == 2
    assert cluster.tf_config == {
        "cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
        "task": {"type": "worker", "index": 1},
    }  # parameter servers left out


def test_worker_zero_is_chief_without_a_chief():
    env = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}})}
    assert cluster_from_env(env).is_chief


def test_vertex_cluster_spec_pools_and_legacy_master():
    spec = {
        "cluster": {
            "workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
            "workerpool1": ["cmle-training-workerpool1-ab-0:2222", "cmle-training-workerpool1-ab-1:2222"],
            "workerpool2": ["cmle-training-workerpool2-ab-0:2222"],
        },
        "environment": "cloud",
        "task": {"type": "workerpool1", "index": 0},
    }
    cluster = cluster_from_env({"CLUSTER_SPEC": json.dumps(spec)})
    assert cluster.source == "CLUSTER_SPEC"
    assert sorted(cluster.hosts) == ["chief", "worker"] and cluster.task_type == "worker" and cluster.worker_id == 1
    ps = cluster_from_env({"CLUSTER_SPEC": json.dumps({**spec, "task": {"type": "workerpool2", "index": 0}})})
    assert ps.task_type == "ps" and not ps.trains
    legacy = {"cluster": {"master": ["m:1"], "worker": ["w:1"]}, "task": {"type": "master", "index": 0}}
    master = cluster_from_env({"TF_CONFIG": json.dumps(legacy)})
    assert master.task_type == "chief" and master.is_chief and master.workers == 2


def test_tf_config_wins_over_cluster_spec():
    tf_config = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    spec = {"cluster": {"workerpool0": ["x:1"]}, "task": {"type": "workerpool0", "index": 0}}
    assert (
        cluster_from_env({"TF_CONFIG": json.dumps(tf_config), "CLUSTER_SPEC": json.dumps(spec)}).source == "TF_CONFIG"
    )


@pytest.mark.parametrize(
    "text, says",
    [
        ("{not json", "TF_CONFIG is not JSON"),
        ('["a"]', "expected a JSON object"),
        ('{"cluster": ["a:1"], "task": {"type": "worker"}}', "expected an object of role -> host list"),
        ('{"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}}', "cluster.worker = 'a:1'"),
        ('{"cluster": {"worker": ["a:1"]}}', "'task' object"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "boss", "index": 0}}', "task type 'boss'"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}', "worker:3 is not in the cluster"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "x"}}', "task.index = 'x'"),
        ('{"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}}', "2 chiefs"),
    ],
)
def test_bad_cluster_descriptions_name_the_problem(text, says):
    with pytest.raises(ClusterError) as caught:
        cluster_from_env({"TF_CONFIG": text})
    assert says in str(caught.value)


# -- the notice poll TensorFlow's handler calls -----------------------------------------------------


def test_notice_poll_hears_preempted_maintenance_and_sigterm():
    stop = StopRequest()
    with MetadataServer() as server:
        poll = NoticePoll(stop, MetadataClient(server.host, timeout=1.0, retrying=once))
        assert poll() is False
        server.set("instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
        assert poll() is False
        server.set("instance/preempted", "TRUE")
        assert poll() is True and poll.source == "preempted"
    with MetadataServer() as server:
        server.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        poll = NoticePoll(stop, MetadataClient(server.host, timeout=1.0, retrying=once))
        assert poll() is True and poll.source == "maintenance"
    signalled = StopRequest()
    signalled.set()
    assert NoticePoll(signalled, None)() is True


def test_notice_poll_without_a_metadata_server_watches_sigterm_only(capsys):
    stop = StopRequest()
    host = f"127.0.0.1:{free_port()}"  # nothing listens there
    poll = NoticePoll(stop, MetadataClient(host, timeout=0.5, retrying=once))
    assert [poll() for _ in range(3)] == [False, False, False]
    assert poll.metadata is None and "watching SIGTERM only" in capsys.readouterr().err
    stop.set()
    assert poll() is True


# -- two real workers -----------------------------------------------------------------------------


class Workers:
    """`count` trainer processes forming one TF_CONFIG cluster on 127.0.0.1."""

    def __init__(
        self,
        tmp_path,
        job_dir: str,
        args: list[str],
        *,
        count: int = 2,
        metadata_hosts: dict[int, str] | None = None,
        module: str = "survivor.trainers.mlp",
    ):
        hosts = [f"127.0.0.1:{p}" for p in free_ports(count)]
        self.progress = [str(tmp_path / f"progress-{i}-{time.monotonic_ns()}.json") for i in range(count)]
        self.procs = []
        unreachable = f"127.0.0.1:{free_port()}"
        for i in range(count):
            tf_config = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
            env = {
                **os.environ,
                "TF_CONFIG": json.dumps(tf_config),
                "SURVIVOR_PROGRESS_FILE": self.progress[i],
                "TF_CPP_MIN_LOG_LEVEL": "3",
                "GCE_METADATA_HOST": (metadata_hosts or {}).get(i, unreachable),
            }
            env.pop("GCE_METADATA_IP", None)  # TensorFlow's own on-GCP probe must not find the emulator
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", module, "--job-dir", job_dir, *args],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            )

    def step(self, i: int) -> int:
        try:
            with open(self.progress[i]) as f:
                return json.load(f)["step"]
        except (OSError, ValueError, KeyError):
            return 0

    def wait_for_step(self, i: int, step: int, timeout: float = 180) -> None:
        def reached() -> bool:
            if self.step(i) >= step:
                return True
            assert all(p.poll() is None for p in self.procs), self.finish()
            return False

        wait_until(reached, timeout, f"worker {i} at step {step}", 0.01)

    def finish(self, timeout: float = 240) -> list[tuple[int, str]]:
        results = []
        for proc in self.procs:
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for p in self.procs:
                    p.kill()
                out, _ = proc.communicate()
            results.append((proc.returncode, out.decode(errors="replace")))
        return results


MLP_ARGS = ["--train-steps", "160", "--checkpoint-steps", "40", "--dropout", "0.3"]


@pytest.mark.slow
def test_two_workers_one_preempted_resume_exactly(tmp_path):
    reference = str(tmp_path / "reference" / "checkpoints")
    outcomes = Workers(tmp_path, reference, MLP_ARGS).finish()
    assert [code for code, _ in outcomes] == [0, 0], outcomes
    assert "worker 0 of 2" in outcomes[0][1] and "2 replica(s) in all" in outcomes[0][1]

    job = str(tmp_path / "job" / "checkpoints")
    with MetadataServer() as metadata:
        workers = Workers(tmp_path, job, [*MLP_ARGS, "--step-seconds", "0.05"], metadata_hosts={1: metadata.host})
        workers.wait_for_step(1, 57)
        metadata.set("instance/preempted", "TRUE")  # worker 1's VM is being preempted
        outcomes = workers.finish()
    assert [code for code, _ in outcomes] == [RESTART_EXIT_CODE] * 2, outcomes
    assert "notice (preempted)" in outcomes[1][1] and "notice (a peer)" in outcomes[0][1]
    import tensorflow as tf

    saved = tf.train.latest_checkpoint(job)
    saved_step = int(saved.rsplit("-", 1)[1])
    assert 57 < saved_step < 160 and saved_step % 40 != 0, "the notice checkpoint, not a periodic one"
    assert not (tmp_path / "job" / "workertemp_1").exists(), "the other worker's scratch copy is gone"

    outcomes = Workers(tmp_path, job, MLP_ARGS).finish()
    assert [code for code, _ in outcomes] == [0, 0], outcomes
    assert all(f"resumed from ckpt-{saved_step} at step {saved_step}" in out for _, out in outcomes)
    # Left out: the handler's own call counter (bookkeeping, not training state), and the serialised
    # object graph, which lists the same objects but `save_counter` before or after that counter
    # depending on whether the process began with a restore.
    ignore = ("checkpointed_runs", "_CHECKPOINTABLE_OBJECT_GRAPH")
    final = {k: v for k, v in checkpoint_values(job).items() if not k.startswith(ignore)}
    uninterrupted = {k: v for k, v in checkpoint_values(reference).items() if not k.startswith(ignore)}
    assert any("moving_mean" in k for k in final) and any(k.startswith("optimizer/") and "momentum" in k for k in final)
    assert_bitwise_equal(final, uninterrupted)


def test_parameter_server_task_exits_at_once_saying_why(tmp_path):
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "TF_CONFIG": json.dumps(
            {"cluster": {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "task": {"type": "ps", "index": 0}}
        ),
    }
    done = subprocess.run(
        [sys.executable, "-m", "survivor.trainers.mlp", "--job-dir", str(tmp_path / "j"), "--train-steps", "5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "task ps:0 has nothing to do" in done.stdout
    assert not (tmp_path / "j").exists()


@pytest.mark.slow
def test_cifar10_resnet_on_two_workers_saves_and_exports_once(tmp_path):
    from survivor.trainers.cifar10_data import synthetic

    synthetic(64, str(tmp_path / "data"), seed=0)
    job = tmp_path / "job" / "checkpoints"
    outcomes = Workers(
        tmp_path,
        str(job),
        [
            "--train-steps",
            "6",
            "--checkpoint-steps",
            "3",
            "--resnet-depth",
            "8",
            "--train-batch-size",
            "16",
            "--data-dir",
            str(tmp_path / "data"),
            "--eval-steps",
            "2",
        ],
        module="survivor.trainers.cifar10",
    ).finish()
    assert [code for code, _ in outcomes] == [0, 0], outcomes
    assert "exported a SavedModel" in outcomes[0][1] and "exported" not in outcomes[1][1]
    # Keras 3 keeps batch-norm moving statistics per replica (unsynchronised): the chief's are the
    # ones saved and exported, so only the chief evaluates
    assert "eval loss" in outcomes[0][1] and "eval loss" not in outcomes[1][1]
    assert sorted(p.name for p in job.glob("ckpt-*.index")) == ["ckpt-3.index", "ckpt-6.index"]
    assert (job / "export" / "saved_model.pb").exists()
    assert not (tmp_path / "job" / "workertemp_1").exists()
