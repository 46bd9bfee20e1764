"""The job spec: three sources, one dataclass, and one clear line per problem."""

import pytest
import yaml

from survivor.spec import JobSpec, SpecError, flat_attributes_to_mapping, kebab

RECIPE_ATTRIBUTES = {
    "jobDir": "gs://my-project-cifar-10-checkpoints",
    "dataDir": "gs://my-project-cifar-10-data/",
    "trainSteps": "99999999",
    "numGpus": "4",
    "momentum": "0.9",
    "weightDecay": "0.0002",
    "learningRate": "0.1",
    "batchNormDecay": "0.997",
    "batchNormEpsilon": "0.00001",
    "gceUser": "trainer",
    # Compute Engine's own keys: never hyperparameters
    "startup-script": "#!/bin/bash\necho hi",
    "created-by": "projects/123/zones/us-west1-b/instanceGroupManagers/cifar10-managed",
    "instance-template": "projects/123/global/instanceTemplates/cifar10-default-params",
    "enable-guest-attributes": "TRUE",
    "ssh-keys": "alice:ssh-rsa AAAA",
    "sshKeys": "bob:ssh-rsa BBBB",
}


def test_recipe_flat_attributes_become_a_spec_with_kebab_case_hyperparameters():
    spec = JobSpec.from_metadata(RECIPE_ATTRIBUTES)
    assert spec.job_dir == "gs://my-project-cifar-10-checkpoints"
    assert spec.data_dir == "gs://my-project-cifar-10-data"
    assert spec.train_steps == 99999999
    assert spec.num_gpus == 4
    assert spec.user == "trainer"
    assert spec.trainer.builtin == "cifar10"
    assert dict(spec.hyperparameters) == {
        "momentum": "0.9",
        "weight-decay": "0.0002",
        "learning-rate": "0.1",
        "batch-norm-decay": "0.997",
        "batch-norm-epsilon": "0.00001",
    }


def test_gce_keys_are_never_passed_to_the_trainer():
    mapping = flat_attributes_to_mapping(RECIPE_ATTRIBUTES)
    names = set(mapping["hyperparameters"])
    for reserved in (
        "startup-script",
        "created-by",
        "instance-template",
        "enable-guest-attributes",
        "ssh-keys",
        "ssh-keys",
        "sshKeys",
        "gce-user",
    ):
        assert reserved not in names


def test_survivor_job_attribute_wins_over_flat_keys():
    spec = JobSpec.from_metadata(
        {
            "survivor-job": "job_dir: /tmp/j\ntrain_steps: 5\ntrainer: {builtin: dummy}\n",
            "jobDir": "gs://other/x",
            "trainSteps": "9",
        }
    )
    assert (spec.job_dir, spec.train_steps, spec.trainer.builtin) == ("/tmp/j", 5, "dummy")


def test_keep_alive_flag_sets_on_finish():
    spec = JobSpec.from_metadata({"jobDir": "gs://bucket/x", "trainSteps": "10", "keepAlive": "true"})
    assert spec.on_finish == "keep-alive"


def test_kebab_case():
    assert kebab("batchNormEpsilon") == "batch-norm-epsilon"
    assert kebab("weight_decay") == "weight-decay"
    assert kebab("lr") == "lr"


@pytest.mark.parametrize(
    "attributes, expected",
    [
        ({"trainSteps": "10"}, "jobDir is missing: expected gs://BUCKET/PATH or an absolute path"),
        ({"jobDir": "gs://b-1/x", "trainSteps": "ten"}, "trainSteps = 'ten': expected a whole number >= 1"),
        (
            {"jobDir": "gs://b-1/x", "trainSteps": "10", "onFinish": "explode"},
            "onFinish = 'explode': expected one of auto, leave-group, stop, delete, keep-alive",
        ),
        (
            {"jobDir": "checkpoints/run1", "trainSteps": "10"},
            "jobDir = 'checkpoints/run1': expected gs://BUCKET/PATH, file:///ABSOLUTE/PATH or an absolute path (not a relative path)",
        ),
        ({"jobDir": "gs://", "trainSteps": "10"}, "jobDir = 'gs://': expected a bucket name after gs://"),
        (
            {"jobDir": "gs://Bad_Bucket!/x", "trainSteps": "10"},
            "jobDir = 'gs://Bad_Bucket!/x': expected a valid bucket name",
        ),
        (
            {"jobDir": "gs://bucket/../x", "trainSteps": "10"},
            "jobDir = 'gs://bucket/../x': expected a path without . or .. segments",
        ),
        ({"jobDir": "s3://bucket/x", "trainSteps": "10"}, "jobDir = 's3://bucket/x': expected gs://BUCKET/PATH"),
        (
            {"jobDir": "gs://b-1/x", "trainSteps": "10", "numGpus": "many"},
            "numGpus = 'many': expected a whole number >= 0",
        ),
    ],
)
def test_bad_flat_specs_name_the_key_the_value_and_what_was_expected(attributes, expected):
    with pytest.raises(SpecError) as err:
        JobSpec.from_metadata(attributes)
    assert any(problem.startswith(expected) for problem in err.value.problems), err.value.problems


def test_every_problem_is_reported_at_once_one_line_each():
    with pytest.raises(SpecError) as err:
        JobSpec.from_yaml("job_dir: relative/dir\ntrain_steps: -3\non_finish: nope\ntrainer: {module: 'a b'}\n")
    problems = err.value.problems
    assert len(problems) == 4, problems
    assert all("\n" not in p for p in problems)
    assert str(err.value).count("\n") == 4


def test_yaml_spec_rejects_unknown_keys_with_a_hint():
    with pytest.raises(SpecError) as err:
        JobSpec.from_yaml(
            "job_dir: /tmp/x\ntrain_steps: 3\ntrainer: {builtin: dummy}\nlearning_rate: 0.1\ntrainSteps: 4\n"
        )
    assert "learning_rate: unknown key (hyperparameters go under hyperparameters:)" in err.value.problems
    assert "trainSteps: unknown key (write train_steps)" in err.value.problems


def test_an_unknown_key_close_to_a_known_one_says_did_you_mean():
    with pytest.raises(SpecError) as err:
        JobSpec.from_yaml(
            "job_dir: /tmp/x\ntrain_step: 3\ntrainer: {builtin: dummy, modul: x}\ncheckpoint_step: 5\n"
            "grace_second: 20\ndeadline: 36h\nfallback: {machine_typ: n1-standard-8}\n"
        )
    problems = err.value.problems
    assert "train_step: unknown key (did you mean train_steps?)" in problems, problems
    assert "checkpoint_step: unknown key (did you mean checkpoint_steps?)" in problems
    assert "grace_second: unknown key (did you mean grace_seconds?)" in problems
    assert any(p.startswith("trainer.modul: unknown key (did you mean module?)") for p in problems), problems
    assert any(p.startswith("fallback.machine_typ: unknown key (did you mean machine_type?)") for p in problems)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[1, 2", "not valid YAML/JSON"),
        ("- a\n- b\n", "expected a mapping of keys to values, got list"),
        (
            "job_dir: /tmp/x\ntrain_steps: 3\ntrainer: {argv: 'python train.py --lr 1'}\n",
            "trainer.argv = 'python train.py --lr 1': expected a list of strings (no shell command line)",
        ),
        (
            "job_dir: /tmp/x\ntrain_steps: 3\ntrainer: {builtin: resnet9000}\n",
            "trainer.builtin = 'resnet9000': expected one of",
        ),
        ("job_dir: /tmp/x\ntrain_steps: 3\ntrainer: {module: m, builtin: dummy}\n", "trainer: expected exactly one of"),
        (
            "job_dir: /tmp/x\ntrain_steps: 3\ntrainer: {builtin: dummy}\nhyperparameters: {lr: [1, 2]}\n",
            "hyperparameters.lr = [1, 2]: expected a single value",
        ),
        (
            "job_dir: /tmp/x\ntrain_steps: 3\ntrainer: {builtin: dummy, package: gs://b-1/pkg.exe}\n",
            "trainer.package = 'gs://b-1/pkg.exe'",
        ),
        (
            "job_dir: /tmp/x\ntrain_steps: 3\ntrainer: {builtin: dummy, git_url: --upload-pack=evil}\n",
            "trainer.git_url = '--upload-pack=evil'",
        ),
    ],
)
def test_bad_yaml_specs_get_one_clear_line(text, expected):
    with pytest.raises(SpecError) as err:
        JobSpec.from_yaml(text)
    assert any(expected in p for p in err.value.problems), err.value.problems


def test_spec_round_trips_through_yaml():
    spec = JobSpec.from_yaml(
        "name: cifar10-run\njob_dir: gs://b-1/run\ntrain_steps: 80000\nnum_gpus: 4\n"
        "trainer: {builtin: cifar10}\nhyperparameters: {momentum: 0.9, use_nesterov: true}\n"
        "compute: {machine_type: n1-standard-16}\n"
    )
    again = JobSpec.from_yaml(spec.to_yaml())
    assert again == spec
    assert dict(spec.hyperparameters) == {"momentum": "0.9", "use-nesterov": "true"}
    assert spec.extra["compute"] == {"machine_type": "n1-standard-16"}


def test_name_defaults_to_the_job_dir_tail():
    spec = JobSpec.from_yaml("job_dir: gs://b-1/runs/CIFAR_10\ntrain_steps: 3\ntrainer: {builtin: dummy}\n")
    assert spec.name == "cifar-10"


def test_the_recipe_dummy_startup_scripts_keys_reach_its_trainer_as_it_passes_them():
    """ml-on-gcp gce/survival-training/gce/startup.sh: hparam1/hparam2 -> --hyperparameter-1/2."""
    spec = JobSpec.from_metadata(
        {
            "jobDir": "gs://b-1/x",
            "trainSteps": "50",
            "checkpointSteps": "5",
            "trainerModule": "wrapper.train",
            "hparam1": "3",
            "hparam2": "0.5",
        }
    )
    assert spec.hyperparameters == (("hyperparameter-1", "3"), ("hyperparameter-2", "0.5"))
    assert spec.num_gpus is None and not spec.num_gpus_named


def test_num_gpus_is_named_only_when_given():
    assert JobSpec.from_metadata({"jobDir": "/x", "trainSteps": "5", "numGpus": "all"}).num_gpus_named
    named = JobSpec.from_yaml("job_dir: /x\ntrain_steps: 5\nnum_gpus: all\ntrainer: {builtin: dummy}\n")
    assert named.num_gpus is None and named.num_gpus_named
    assert JobSpec.from_mapping(named.to_mapping()).num_gpus_named  # survives the survivor-job round trip
    assert not JobSpec.from_yaml("job_dir: /x\ntrain_steps: 5\ntrainer: {builtin: dummy}\n").num_gpus_named


def test_a_cloud_source_repository_without_a_git_path_is_one_clear_line():
    with pytest.raises(SpecError) as caught:
        JobSpec.from_metadata({"jobDir": "/x", "trainSteps": "5", "trainerRepo": "my-trainer"})
    assert caught.value.problems == [
        "trainerRepo = 'my-trainer': a Cloud Source Repositories name, which survivor does not clone: set "
        "trainerGitPath to its git URL (https://source.developers.google.com/p/PROJECT/r/REPO) or to any other "
        "repository"
    ]
    spec = JobSpec.from_metadata({"jobDir": "/x", "trainSteps": "5", "trainerRepo": "r", "trainerGitPath": "/src"})
    assert spec.trainer.git_url == "/src" and spec.hyperparameters == ()


def test_a_save_signal_is_sigusr1_or_sigusr2():
    spec = JobSpec.from_yaml("job_dir: /x\ntrain_steps: 5\ntrainer: {argv: [t], save_signal: usr2}\n")
    assert spec.trainer.save_signal == "SIGUSR2"
    with pytest.raises(SpecError) as caught:
        JobSpec.from_yaml("job_dir: /x\ntrain_steps: 5\ntrainer: {argv: [t], save_signal: SIGKILL}\n")
    assert caught.value.problems == ["trainer.save_signal = 'SIGKILL': expected one of SIGUSR1, SIGUSR2"]


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("train_steps", 1e12, None),
        ("train_steps", 10**12, None),
        ("train_steps", 10**12 + 1, "a whole number <= 1e+12"),
        ("train_steps", float("inf"), "a whole number >= 1"),
        ("train_steps", True, "a whole number >= 1"),
        ("num_gpus", 16, None),
        ("num_gpus", 17, "a whole number <= 16"),
        ("keep", 0, "a whole number >= 1"),
        ("max_failed_attempts", 1_000_000, None),
        ("grace_seconds", 3600, None),
        ("grace_seconds", 3600.5, "a finite number <= 3600"),
        ("grace_seconds", "-inf", "a number >= 1"),
        ("sync_seconds", 0.05, "a number >= 0.1"),
        ("lease_seconds", "nan", "a number >= 1"),
        ("lease_seconds", "1" * 41, "a number >= 1"),
    ],
)
def test_every_number_has_a_range(key, value, expected):
    text = yaml.safe_dump({"job_dir": "/tmp/x", "train_steps": 3, "trainer": {"builtin": "dummy"}, key: value})
    if expected is None:
        JobSpec.from_yaml(text)
        return
    with pytest.raises(SpecError) as err:
        JobSpec.from_yaml(text)
    assert [p.split(": expected ", 1)[1] for p in err.value.problems] == [expected], err.value.problems


def test_a_refused_argv_is_one_line_not_two():
    with pytest.raises(SpecError) as err:
        JobSpec.from_yaml("job_dir: /tmp/x\ntrain_steps: 3\ntrainer: {argv: {python: train.py}}\n")
    assert err.value.problems == [
        "trainer.argv = {'python': 'train.py'}: expected a list of strings (no shell command line)"
    ]
