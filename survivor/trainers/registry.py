"""The trainers survivor ships, by the name a spec gives them (`trainer: {builtin: mlp}`): each
one's module, the flags every one accepts, its save signal and which start before the restore.

A table and nothing more: the job spec (survivor/spec/) reads it, and every part reads the spec, so
it imports nothing (no TensorFlow, nothing of survivor).
"""

from __future__ import annotations


#: Trainers shipped in survivor.trainers, by builtin name.
BUILTIN_TRAINERS = {
    "cifar10": "survivor.trainers.cifar10",
    "mlp": "survivor.trainers.mlp",
    "dummy": "survivor.trainers.dummy",
}
#: What every built-in trainer declares: the flags it accepts from the agent (so `--num-gpus` is
#: passed even when the spec does not name it: the agent's GPU count) and its save signal
#: (SIGUSR1: save now, keep training). tests/test_trainer_launch.py checks each parser accepts them.
BUILTIN_FLAGS = frozenset({"--job-dir", "--data-dir", "--train-steps", "--num-gpus", "--checkpoint-steps"})
BUILTIN_SAVE_SIGNAL = "SIGUSR1"
#: The built-in trainers whose start (TensorFlow's import, the devices) overlaps the agent's restore:
#: the agent starts them before it restores, and they wait at the start gate (contract.START_GATE_ENV)
#: before they read the job dir. The dummy trainer starts in a tenth of a second and has no gate.
BUILTIN_WARM_START = frozenset({"mlp", "cifar10"})
