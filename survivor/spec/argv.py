"""The one place a trainer's argv is built from a job spec (`trainer_argv`)."""

from __future__ import annotations


from survivor.trainers.registry import BUILTIN_FLAGS, BUILTIN_TRAINERS
from survivor.spec.job import JobSpec


def trainer_argv(
    spec: JobSpec,
    *,
    python: str,
    job_dir: str,
    data_dir: str | None,
    num_gpus: int,
    module: str | None = None,
) -> list[str]:
    """The one place trainer argv is built. `module` overrides the spec's (e.g. a delivered package).

    Every flag is one the spec names (job_dir and train_steps it always does), or one a built-in
    trainer declares: `--num-gpus` goes to a built-in trainer always (the count the agent found), to
    any other only when the spec names num_gpus (numGpus).
    """
    trainer = spec.trainer
    if trainer.argv:
        argv = list(trainer.argv)
    else:
        name = module or trainer.module or BUILTIN_TRAINERS[trainer.builtin or ""]
        argv = [python, "-m", name]
    argv += ["--job-dir", job_dir]
    if data_dir:
        argv += ["--data-dir", data_dir]
    argv += ["--train-steps", str(spec.train_steps)]
    if spec.num_gpus_named or (trainer.builtin_name is not None and "--num-gpus" in BUILTIN_FLAGS):
        argv += ["--num-gpus", str(num_gpus)]
    if spec.checkpoint_steps:
        argv += ["--checkpoint-steps", str(spec.checkpoint_steps)]
    for name, value in spec.hyperparameters:
        # an empty value is a bare flag (`no-export: ""` or `no-export:` -> `--no-export`)
        argv += [f"--{name}", value] if value != "" else [f"--{name}"]
    return argv
