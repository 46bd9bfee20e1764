"""A careless or hostile job spec, through `survivor agent` itself: every one is refused with one line
per problem naming the key, FAILED in the job dir when the spec names a valid one, exit 2, and the
unit never restarts exit 2. Nothing crashes, hangs or eats memory on the way."""

from __future__ import annotations

import configparser
import json
import os
import time

import pytest
import yaml

from survivor.agent import boot as agent
from survivor.jobdir.journal import Journal
from survivor.local.instance import LocalInstance
from survivor.spec import MAX_SPEC_BYTES, JobSpec, SpecError, agent_flag_taken, is_secret_name
from survivor.jobdir.storage import open_storage
from tests.conftest import PYTHON, dummy_spec

UNIT = os.path.join(os.path.dirname(os.path.dirname(agent.__file__)), "startup", "survivor-agent.service")

BOMB = (
    "\n".join(
        ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
        + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    )
    + "\n"
)


def _edit(spec: dict, **changes) -> str:
    for key, value in changes.items():
        if key == "argv":
            spec["trainer"]["argv"] = value
        else:
            spec[key] = value
    return yaml.safe_dump(spec)


#: name -> (how to spoil a valid spec, a piece of the one line it must produce)
YAML_CASES = {
    "argv-a-number": (lambda s: _edit(s, argv=5), "trainer.argv = 5: expected a list of strings"),
    "argv-a-mapping": (lambda s: _edit(s, argv={"python": "train.py"}), "trainer.argv = {'python': 'train.py'}"),
    "thousands-of-digits": (
        lambda s: _edit(s).replace("train_steps: 60", "train_steps: " + "9" * 5000),
        "refused: a number of 5000 characters",
    ),
    "digits-as-a-string": (lambda s: _edit(s, train_steps="9" * 5000), "train_steps = '9999"),
    "a-huge-float": (lambda s: _edit(s, train_steps=1e300), "train_steps = 1e+300: expected a whole number <= 1e+12"),
    "alias-bomb": (
        lambda s: BOMB + _edit(s) + "hyperparameters: {z: *l9}\n",
        "refused: more than 100000 values once its aliases are expanded",
    ),
    "self-referring-alias": (lambda s: _edit(s) + "hyperparameters: {z: &a [*a]}\n", "an alias that refers to itself"),
    "nesting-10000-deep": (
        lambda s: _edit(s) + "hyperparameters: {z: " + "[" * 10000 + "]" * 10000 + "}\n",
        "nested deeper than 64 levels",
    ),
    "grace-inf": (
        lambda s: _edit(s).replace("grace_seconds: 5", "grace_seconds: .inf"),
        "grace_seconds = inf: expected a finite number <= 3600",
    ),
    "sync-nan": (
        lambda s: _edit(s).replace("sync_seconds: 0.3", "sync_seconds: .nan"),
        "sync_seconds = nan: expected a number >= 0.1",
    ),
    "lease-1e400": (lambda s: _edit(s, lease_seconds="1e400"), "lease_seconds = '1e400': expected a finite number"),
    "grace-a-week": (
        lambda s: _edit(s, grace_seconds=604800),
        "grace_seconds = 604800: expected a finite number <= 3600",
    ),
    "keys-not-strings": (lambda s: _edit(s) + "1: one\n2.5: two\nbogus: three\n", "bogus: unknown key"),
    "user-with-nul": (lambda s: _edit(s, user="bob\x00"), "user = 'bob\\x00'"),
    "hparam-value-with-nul": (lambda s: _edit(s, hyperparameters={"lr": "0.1\x00"}), "hyperparameters.lr = '0.1\\x00'"),
    "hparam-named-job-dir": (
        lambda s: _edit(s, hyperparameters={"job-dir": "/tmp/elsewhere"}),
        "hyperparameters.job-dir: a hyperparameter may not be named like the trainer's contract flag --job-dir",
    ),
    "hparam-job_dir-underscored": (lambda s: _edit(s, hyperparameters={"job_dir": "/tmp/elsewhere"}), "flag --job-dir"),
    "hparam-a-prefix-of-train-steps": (
        lambda s: _edit(s, hyperparameters={"train": 1}),
        "argparse reads --train as --train-steps",
    ),
    "hparam-named-help": (lambda s: _edit(s, hyperparameters={"help": ""}), "--help prints and exits 0"),
    "a-secret-in-a-bad-value": (
        lambda s: _edit(s, hyperparameters={"api-key": ["sk-live-0123456789"]}),
        "hyperparameters.api-key = '***': expected a single value",
    ),
}

#: Specs whose job dir itself is refused: no FAILED can be written, the rest is the same.
BAD_JOB_DIRS = {
    "root": ("/", "job_dir = '/': expected a directory below /"),
    "file-root": ("file:///", "job_dir = 'file:///': expected a directory below /"),
    "dot-dot": ("/tmp/../", "expected a path without . or .. segments"),
    "nul": ("/tmp/x\x00y", "expected a location without control characters"),
}


def _boot_bad_spec(attributes: dict, root: str) -> tuple[LocalInstance, float]:
    vm = LocalInstance(attributes, root, python=PYTHON)
    started = time.monotonic()
    vm.boot()
    code = vm.wait(30)
    elapsed = time.monotonic() - started
    try:
        assert code == 2, f"exit {code}; see {vm.log_path()}:\n" + open(vm.log_path()).read()[-3000:]
    finally:
        vm.close()
    return vm, elapsed


def _assert_one_line_each(vm: LocalInstance, expected: str) -> list[str]:
    raw = open(vm.log_path(), encoding="utf-8", errors="replace").read()
    assert "Traceback" not in raw
    lines = [line for line in raw.splitlines() if line.strip()]
    assert all(line.startswith("{") for line in lines), "only JSON lines: no traceback, no stray output"
    assert all(len(line) < 4000 for line in lines), "no line carries a whole hostile value"
    problems = [entry["message"] for entry in map(json.loads, lines) if entry["message"].startswith("job spec: ")]
    assert any(expected in p for p in problems), problems
    return problems


@pytest.mark.parametrize("case", sorted(YAML_CASES))
def test_a_hostile_yaml_spec_is_one_line_failed_and_exit_2(case, tmp_path):
    spoil, expected = YAML_CASES[case]
    job_dir = str(tmp_path / "jobdir")
    text = spoil(yaml.safe_load(dummy_spec(job_dir, tmp_path)))
    vm, elapsed = _boot_bad_spec({"survivor-job": text}, str(tmp_path / "vm"))
    assert elapsed < 20
    _assert_one_line_each(vm, expected)
    failed = Journal(open_storage(job_dir)).state().failed
    assert failed is not None, "a YAML survivor-job spec error writes FAILED, as the flat form does"
    assert expected in failed["reason"] and "sk-live" not in failed["reason"]
    assert not os.path.exists(tmp_path / "steps.log"), "no trainer ran"


@pytest.mark.parametrize("case", sorted(BAD_JOB_DIRS))
def test_a_job_dir_survivor_may_not_use_is_one_line_and_exit_2(case, tmp_path, monkeypatch):
    job_dir, expected = BAD_JOB_DIRS[case]
    monkeypatch.chdir(tmp_path)  # the agent's cwd: `file:///` once became the relative dir ./file:
    text = yaml.safe_dump({**yaml.safe_load(dummy_spec("/x", tmp_path)), "job_dir": job_dir})
    vm, _ = _boot_bad_spec({"survivor-job": text}, str(tmp_path / "vm"))
    _assert_one_line_each(vm, expected)
    assert not os.path.exists(tmp_path / "file:") and not os.path.exists("/survivor")
    assert not os.path.exists(tmp_path / "steps.log")


@pytest.mark.parametrize(
    "attributes, expected",
    [
        ({"trainSteps": "9" * 5000}, "trainSteps = '9999"),
        ({"trainSteps": "100", "graceSeconds": "inf"}, "graceSeconds = 'inf': expected a finite number <= 3600"),
        ({"trainSteps": "100", "graceSeconds": "nan"}, "graceSeconds = 'nan': expected a number >= 1"),
        (
            {"trainSteps": "100", "job": "/tmp/elsewhere"},
            "job: a hyperparameter may not be named like the trainer's contract flag --job-dir",
        ),
        (
            {"trainSteps": "100", "help": "x"},
            "help: a hyperparameter may not be named like the trainer's contract flag --help",
        ),
        ({"trainSteps": "100", "gceUser": "bob\x00"}, "gceUser = 'bob\\x00'"),
    ],
    ids=["digits", "grace-inf", "grace-nan", "hparam-job", "hparam-help", "user-nul"],
)
def test_a_hostile_flat_spec_is_one_line_failed_and_exit_2(attributes, expected, tmp_path):
    job_dir = str(tmp_path / "jobdir")
    vm, _ = _boot_bad_spec({"jobDir": job_dir, **attributes}, str(tmp_path / "vm"))
    _assert_one_line_each(vm, expected)
    assert expected in Journal(open_storage(job_dir)).state().failed["reason"]


def test_the_unit_never_restarts_an_invalid_spec():
    """systemd.service(5): an exit status in RestartPreventExitStatus= is not restarted even with
    Restart=on-failure. The agent's exit for an invalid spec must be in it, and only that one."""
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(UNIT)
    assert unit["Service"]["Restart"] == "on-failure"
    prevented = unit["Service"]["RestartPreventExitStatus"].split()
    assert prevented == [str(agent.EXIT_BAD_SPEC)]
    assert str(agent.EXIT_RETRY) not in prevented


def test_a_secret_hyperparameter_never_reaches_the_log(tmp_path, instance_factory):
    """The trainer gets the value; the agent's lines (the argv it logs, the trainer's own output
    it forwards) show *** instead."""
    secret = "sk-live-0123456789abcdef"
    job_dir = str(tmp_path / "jobdir")
    vm = instance_factory(
        dummy_spec(job_dir, tmp_path, train_steps=5, hyperparameters={"api-key": secret, "learning-rate": 0.1})
    )
    vm.boot()
    assert vm.wait(60) == 0
    raw = open(vm.log_path(), encoding="utf-8").read()
    assert secret not in raw
    started = next(entry for entry in vm.log_lines() if entry["message"] == "trainer started")
    assert "--api-key ***" in started["argv"] and "--learning-rate 0.1" in started["argv"]
    echoed = [e["message"] for e in vm.log_lines() if e.get("source") == "trainer" and "--api-key" in e["message"]]
    assert echoed and all(secret not in m and "***" in m for m in echoed)  # the dummy prints its extra flags


# -- the pure decisions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, flag",
    [
        ("job-dir", "job-dir"),
        ("job_dir", "job-dir"),
        ("jobDir", "job-dir"),
        ("JOB-DIR", "job-dir"),
        ("job", "job-dir"),
        ("j", "job-dir"),
        ("data", "data-dir"),
        ("train-steps", "train-steps"),
        ("trainSteps", "train-steps"),
        ("num-gpus", "num-gpus"),
        ("num", "num-gpus"),
        ("checkpoint-steps", "checkpoint-steps"),
        ("checkpoint", "checkpoint-steps"),
        ("help", "help"),
        ("h", "help"),
        ("hel", "help"),
        ("learning-rate", None),
        ("job-dirs", None),
        ("jobs", None),
        ("momentum", None),
        ("data-dir-2", None),
        ("hparam1", None),
    ],
)
def test_a_hyperparameter_may_not_set_the_agents_own_flags(name, flag):
    assert agent_flag_taken(name) == flag


@pytest.mark.parametrize(
    "name, secret",
    [
        ("api-key", True),
        ("apiKey", True),
        ("hf_token", True),
        ("db-password", True),
        ("client_secret", True),
        ("gcp-credentials", True),
        ("learning-rate", False),
        ("momentum", False),
        ("keep-prob", False),
    ],
)
def test_names_that_look_secret(name, secret):
    assert is_secret_name(name) is secret


def test_two_hyperparameters_for_one_flag_are_refused():
    with pytest.raises(SpecError) as err:
        JobSpec.from_yaml(
            "job_dir: /tmp/x\ntrain_steps: 3\ntrainer: {builtin: dummy}\n"
            "hyperparameters: {learning_rate: 1, learning-rate: 2}\n"
        )
    assert err.value.problems == ["hyperparameters.learning-rate: a second hyperparameter for the flag --learning-rate"]


def test_a_spec_larger_than_a_metadata_value_is_refused_before_parsing():
    with pytest.raises(SpecError, match=f"longer than {MAX_SPEC_BYTES} bytes"):
        JobSpec.from_yaml("job_dir: /tmp/x\n" + "#" * MAX_SPEC_BYTES)


def test_a_spec_error_carries_the_job_dir_only_when_it_is_valid():
    with pytest.raises(SpecError) as err:
        JobSpec.from_yaml("job_dir: gs://bucket-1/run/\ntrain_steps: .inf\ntrainer: {builtin: dummy}\n")
    assert err.value.job_dir == "gs://bucket-1/run"
    with pytest.raises(SpecError) as err:
        JobSpec.from_yaml("job_dir: 'file:///'\ntrain_steps: 3\ntrainer: {builtin: dummy}\n")
    assert err.value.job_dir is None


def test_file_urls_keep_their_root_slash():
    spec = JobSpec.from_yaml("job_dir: 'file:///data/run/'\ntrain_steps: 3\ntrainer: {builtin: dummy}\n")
    assert spec.job_dir == "file:///data/run"


def test_random_values_in_every_key_give_a_spec_or_one_line_errors_never_a_crash():
    """Every value type YAML can produce, in every key: the parser and validator either build a spec
    or raise SpecError with one short line per problem."""
    import random

    rng = random.Random(15)
    values = [
        None,
        True,
        0,
        -1,
        10**13,
        1.5,
        float("inf"),
        float("nan"),
        "",
        " ",
        "x" * 300,
        "\x00",
        "/",
        "file:///",
        "gs://",
        "9" * 50,
        [],
        [1, "a"],
        {},
        {"a": {"b": [1]}},
        "2001-12-14",
        "all",
        "SIGUSR1",
        "-rf",
    ]
    keys = [
        "job_dir",
        "data_dir",
        "train_steps",
        "checkpoint_steps",
        "num_gpus",
        "trainer",
        "hyperparameters",
        "on_finish",
        "keep_alive",
        "user",
        "keep",
        "grace_seconds",
        "max_failed_attempts",
        "sync_seconds",
        "lease_seconds",
        "name",
        "compute",
        "bogus",
    ]
    trainer_keys = ["module", "argv", "builtin", "git_url", "git_ref", "package", "save_signal"]
    for _ in range(3000):
        data = {"job_dir": "/tmp/x", "train_steps": 3, "trainer": {"builtin": "dummy"}}
        for key in rng.sample(keys, 3):
            data[key] = rng.choice(values)
        if isinstance(data.get("trainer"), dict):
            data["trainer"] = {**data["trainer"], rng.choice(trainer_keys): rng.choice(values)}
        if rng.random() < 0.3:
            data["hyperparameters"] = {rng.choice(["lr", "job", "api-key", 3]): rng.choice(values)}
        for text in (yaml.safe_dump(data), json.dumps(data, default=str)):
            try:
                JobSpec.from_yaml(text)
            except SpecError as exc:
                assert exc.problems and all("\n" not in p and len(p) < 400 for p in exc.problems), exc.problems
