"""The survival-training recipe's trainer loop, unchanged, training the shared workload.

    python -m benchmarks.peers.recipe --job-dir=DIR --train-steps=N --checkpoint-steps=C \
        --hyperparameter-1=64 --hyperparameter-2=0.05 [--step-seconds S]

The flags are the ones the recipe's startup script passes (tests/recipe/gce/startup.sh). The loop
is `runner` from tests/recipe/wrapper/train.py (vendored byte for byte, never edited): it resumes
from the newest `dummy-checkpoint-<index>.json` in the job dir at the step after it, calls the
trainer's one-step callable, and every `checkpoint_steps` writes that callable's last result, "a
JSON serializable representation of its state", in place with `json.dump`.

What the recipe leaves to the user, and this module supplies as a user would: `trainer_initializer`
(the recipe's is a `random.random()` stand-in). Here it builds the model, restores its variables
from the newest checkpoint's `model` entry (read with the recipe's own `get_checkpoints`,
`latest_checkpoint`, `load_checkpoint`), and returns a callable that runs one training step, pauses
`--step-seconds`, reports the step, and returns the state as a mapping that `json.dump` expands
into every variable's values only when the loop saves (so steps between saves pay nothing for it).
hyperparameter-1 is the hidden width, hyperparameter-2 the learning rate.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from benchmarks.peers import workload

RECIPE_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "recipe"
)


class ModelState(dict):
    """The model's and optimizer's variables as JSON, expanded when the recipe's `json.dump` asks for them."""

    def __init__(self, model, optimizer):
        super().__init__(variables=None)  # not empty: json skips a mapping it believes empty
        self._model, self._optimizer = model, optimizer

    def items(self):
        return [
            ("model", [v.numpy().tolist() for v in self._model.variables]),
            ("optimizer", [v.numpy().tolist() for v in self._optimizer.variables]),
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job-dir")
    parser.add_argument("--checkpoint-steps", type=int)
    parser.add_argument("--train-steps", type=int, default=None)
    parser.add_argument("--hyperparameter-1", type=int, required=False)
    parser.add_argument("--hyperparameter-2", type=float, required=False)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args(argv)
    sys.path.insert(0, RECIPE_DIR)
    from wrapper import train as recipe  # tests/recipe/wrapper/train.py, unchanged

    from survivor.trainers.contract import report_progress

    def trainer_initializer(hyperparameters):
        strategy = workload.strategy()
        with strategy.scope():
            model, optimizer = workload.model_and_optimizer(
                hyperparameters["hyperparameter_1"], hyperparameters["hyperparameter_2"]
            )
            optimizer.build(model.trainable_variables)
        started = time.perf_counter()
        path, index = recipe.latest_checkpoint(recipe.get_checkpoints(args.job_dir))
        step = 0
        if path is not None:
            state = recipe.load_checkpoint(path)["model"]
            for variable, value in zip(model.variables, state["model"]):
                variable.assign(value)
            for variable, value in zip(optimizer.variables, state["optimizer"]):
                variable.assign(value)
            step = (index + 1) * args.checkpoint_steps  # where runner() resumes: the step after the save
        workload.note(restore=time.perf_counter() - started, initial_step=step)
        train_step = workload.custom_step(strategy, model, optimizer)
        iterator = iter(strategy.experimental_distribute_dataset(workload.dataset()))
        done = [step]

        def _trainer():
            train_step(iterator)
            workload.pause(args.step_seconds)
            done[0] += 1
            report_progress(done[0])
            return ModelState(model, optimizer)

        return _trainer

    recipe.runner(
        trainer_initializer,
        args.job_dir,
        args.train_steps,
        args.checkpoint_steps,
        {"hyperparameter_1": args.hyperparameter_1, "hyperparameter_2": args.hyperparameter_2},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
