"""Your own training loop, resumable in three lines: restore the newest checkpoint, save by step.

    >>> from survivor.trainers.resume import ResumableCheckpoint
    >>> ckpt = ResumableCheckpoint(args.job_dir, model=model, optimizer=optimizer)   # builds, restores
    >>> for step in range(ckpt.step, args.train_steps):                             # 0, or where it stopped
    ...     train_step(next(batches))
    ...     if stop.requested or (step + 1) % args.checkpoint_steps == 0:
    ...         ckpt.save(step + 1)                                                 # ckpt-<step>, by step
    ...     if stop.requested:
    ...         break

It does what TensorFlow's checkpoint guide leaves to you, and what survivor needs of a trainer
(docs/trainer-contract.md):

- builds the Keras 3 optimizer before it restores: restored into an optimizer not built yet, Adam's
  moments are dropped without a word (the guide's loop restores first; after a resume its loss
  jumped from 0.25 to 1.82);
- restores the newest checkpoint in `job_dir`: the one TensorFlow's `checkpoint` state file names,
  else the newest `ckpt-N` by name (a commit taken before the state file was written), and checks
  that every object of the run was found in it (`assert_existing_objects_matched`);
- the step it resumes at is the optimizer's own count of updates (`optimizer.iterations`), or the
  `step` variable you pass: never a number guessed from a file name;
- saves as `ckpt-<step>` (`CheckpointManager.save(checkpoint_number=step)`): the guide's
  `manager.save()` numbers checkpoints by save count, and survivor takes the number in the name
  for the step.
"""

from __future__ import annotations

import os


class ResumableCheckpoint:
    """A job dir's checkpoint of `objects` (a model, an optimizer, a dataset iterator...), restored on
    construction; `step` is where training resumes. `step_variable`: a `tf.Variable` counting steps
    when there is no optimizer (else `optimizer.iterations` is the step). `keep`: checkpoints kept."""

    def __init__(self, job_dir: str, *, keep: int = 3, step_variable=None, **objects):
        import tensorflow as tf

        from survivor.trainers.loop import latest_checkpoint

        optimizer = objects.get("optimizer")
        model = objects.get("model")
        if optimizer is not None and hasattr(optimizer, "build") and model is not None:
            optimizer.build(model.trainable_variables)  # before the restore: else its slots are dropped
        if step_variable is not None:
            self._step = step_variable
        elif optimizer is not None:
            self._step = optimizer.iterations
        else:
            raise ValueError("pass an optimizer (its iterations count the steps) or a step_variable")
        if step_variable is not None:
            objects.setdefault("step", step_variable)
        self.checkpoint = tf.train.Checkpoint(**objects)
        self.manager = tf.train.CheckpointManager(self.checkpoint, job_dir, max_to_keep=keep, checkpoint_name="ckpt")
        self.restored = latest_checkpoint(self.manager, job_dir)
        if self.restored:
            self.checkpoint.restore(self.restored).assert_existing_objects_matched()
            print(f"resumed from {os.path.basename(self.restored)} at step {self.step}", flush=True)

    @property
    def step(self) -> int:
        """The step training is at: restored, or 0 for a start."""
        return int(self._step.numpy())

    def save(self, step: int | None = None) -> str:
        """Saves `ckpt-<step>` (the current step by default); returns its path."""
        return self.manager.save(checkpoint_number=self.step if step is None else step)
