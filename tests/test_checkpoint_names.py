"""The step of a snapshot is known, never guessed from any number in any name:
TensorFlow's state file, the spec's `checkpoint_pattern`, or the number right after `ckpt` or
`checkpoint`; any other file is content. A step beyond `train_steps` is refused, named, once."""

import logging
import os

import pytest

from survivor.agent.ending import AttemptResult, decide_ending
from survivor.agent.mirror import Mirror
from survivor.jobdir.snapshot import decide_files_and_step, scan, step_in_name
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore
from survivor.spec import JobSpec, SpecError, checkpoint_naming


@pytest.mark.parametrize(
    "name, step",
    [
        ("ckpt-1200.index", 1200),
        ("ckpt-1200.data-00000-of-00001", 1200),
        ("model.ckpt-500.meta", 500),
        ("dummy-checkpoint-8.json", 8),
        ("checkpoint_30.weights.h5", 30),
        ("Checkpoint-4.pt", 4),
        ("sub/dir/ckpt-9.index", 9),
        # what users' code writes that names no step
        ("ckpt-07-0.7641.keras", None),  # Keras ModelCheckpoint("ckpt-{epoch:02d}-{val_accuracy:.4f}.keras")
        ("checkpoint.weights.h5", None),  # Keras's docs' ModelCheckpoint file: "h5" is no step
        ("checkpoint-config-20261127.yaml", None),
        ("hparams-v2.json", None),
        ("mycheckpoint5.json", None),
        ("weights.05-0.32.hdf5", None),
    ],
)
def test_the_default_rule_takes_only_the_number_right_after_a_checkpoint_word(name, step):
    assert step_in_name(name) == step


def test_a_spec_pattern_says_where_the_step_is_and_nothing_else_counts():
    naming = checkpoint_naming("model-{step}-*.keras")
    assert step_in_name("model-0350-0.7641.keras", naming) == 350
    assert step_in_name("ckpt-1200.index", naming) is None  # the pattern replaces the default rule
    nested = checkpoint_naming("runs/*/ckpt-{step}.h5")
    assert step_in_name("runs/a/ckpt-12.h5", nested) == 12 and step_in_name("runs/a/b/ckpt-12.h5", nested) is None
    step, chosen = decide_files_and_step(
        ["model-0350-0.7641.keras", "model-0400-0.8.keras", "config-2026.yaml"], None, naming
    )
    assert step == 400 and "config-2026.yaml" in chosen
    for bad in ("model.keras", "{step}-{step}.h5"):
        with pytest.raises(SpecError, match=r"checkpoint_pattern = .*`\{step\}` exactly once"):
            JobSpec.from_mapping(
                {"job_dir": "/j", "train_steps": 5, "trainer": {"builtin": "cifar10"}, "checkpoint_pattern": bad}
            )


def test_files_whose_names_hold_no_step_are_content_of_the_snapshot_not_its_step():
    """The issue's repro: a config file dated 20261127 took the step and lost all committed work."""
    step, chosen = decide_files_and_step(["dummy-checkpoint-40.json", "checkpoint-config-20261127.yaml"], None)
    assert step == 40 and chosen == ["checkpoint-config-20261127.yaml", "dummy-checkpoint-40.json"]


def _mirror(tmp_path, max_step, naming=None):
    local = tmp_path / "job"
    local.mkdir(exist_ok=True)
    storage = open_storage(str(tmp_path / "jobdir"))
    store = CheckpointStore(storage, max_step=max_step)
    return (
        local,
        store,
        Mirror(
            store,
            storage,
            str(local),
            attempt=1,
            interval=3600,
            committed_step=None,
            on_commit=lambda stats: None,
            naming=naming,
        ).start(restored=frozenset()),
    )


def test_a_keras_checkpoint_is_committed_at_the_step_its_pattern_gives(tmp_path):
    local, store, mirror = _mirror(tmp_path, max_step=405, naming=checkpoint_naming("ckpt-{step}-*.keras"))
    (local / "ckpt-0135-0.7641.keras").write_bytes(b"keras zip")
    assert mirror.sync().manifest.step == 135
    mirror.stop()


def test_a_name_with_no_step_commits_nothing_and_says_so_once(tmp_path, caplog):
    local, store, mirror = _mirror(tmp_path, max_step=405)
    (local / "ckpt-07-0.7641.keras").write_bytes(b"keras zip")
    with caplog.at_level(logging.WARNING, logger="survivor.mirror"):
        assert mirror.sync() is None and mirror.sync() is None
    said = [r for r in caplog.records if "name no step" in r.getMessage()]
    assert len(said) == 1 and "checkpoint_pattern" in said[0].getMessage()
    assert store.committed() == []
    mirror.stop()


def test_a_step_beyond_train_steps_is_refused_naming_the_file_and_the_finish_fails(tmp_path, caplog):
    """`ckpt-7641.keras` in a 405-step job: committing it made a manifest no restore follows, and
    simulate ended 'DONE at step 7641'. It is refused, named once, and a trainer that ends on it
    fails (counted) instead of DONE: every next boot would start from scratch."""
    local, store, mirror = _mirror(tmp_path, max_step=405)
    (local / "ckpt-100.index").write_bytes(b"100")
    assert mirror.sync().manifest.step == 100
    (local / "ckpt-7641.keras").write_bytes(b"keras zip")
    with caplog.at_level(logging.WARNING, logger="survivor.mirror"):
        assert mirror.sync() is None and mirror.sync() is None
    said = [r.getMessage() for r in caplog.records if "beyond train_steps" in r.getMessage()]
    assert len(said) == 1 and "ckpt-7641.keras names step 7641" in said[0], said
    assert [m.step for m in store.committed()] == [100]
    ending = decide_ending(
        AttemptResult(trainer_code=0, committed_step=100, refused=mirror.refused, uncommitted_step=mirror.uncommitted())
    )
    assert ending.outcome == "failed" and ending.counts and "ckpt-7641.keras" in ending.reason
    os.remove(local / "ckpt-7641.keras")  # the file gone, the refusal goes with it
    assert mirror.sync() is None and mirror.refused == "" and scan(str(local)).step == 100
    mirror.stop()


def test_a_checkpoint_numbered_by_save_count_is_said_once_with_the_fix(tmp_path, caplog):
    """TensorFlow's guide: `manager.save()` numbers by save count, so the agent waited for a commit
    of step 2733 that never came. The mismatch is said once, with `checkpoint_number=step`."""
    local, store, mirror = _mirror(tmp_path, max_step=5000)
    (local / "checkpoint").write_text('model_checkpoint_path: "ckpt-6"\nall_model_checkpoint_paths: "ckpt-6"\n')
    (local / "ckpt-6.index").write_bytes(b"6")
    (local / "ckpt-6.data-00000-of-00001").write_bytes(b"w")
    with caplog.at_level(logging.WARNING, logger="survivor.mirror"):
        mirror.check_saved(2733)
        mirror.check_saved(2733)
        mirror.check_saved(6)  # agrees: nothing to say
    said = [r.getMessage() for r in caplog.records if "reports saving step" in r.getMessage()]
    assert len(said) == 1 and "checkpoint_number=step" in said[0] and "number is 6" in said[0], said
    mirror.stop()
