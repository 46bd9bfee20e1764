"""Keras 3 `BackupAndRestore` with `model.fit`, as its docstring uses it, on the shared workload.

    python -m benchmarks.peers.keras_backup --backup-dir DIR --train-steps N --steps-per-epoch E \
        [--save-freq epoch|STEPS] [--step-seconds S]

The callback is Keras's own, unchanged: it restores in `on_train_begin` (weights and the epoch to
start at), saves at each epoch's end or every `save_freq` batches, and resumes at an epoch start.
Two callbacks of this harness sit beside it and change nothing it does: one before it pauses
`--step-seconds` after each batch and reports the global step (`report_progress`, as survivor's
trainer does), one on each side of it in `on_train_begin` times the restore. The process dies on
SIGTERM (Keras installs no handler), as `fit` would under a startup script.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.peers import workload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backup-dir", required=True)
    parser.add_argument("--train-steps", type=int, required=True)
    parser.add_argument("--steps-per-epoch", type=int, required=True)
    parser.add_argument("--save-freq", default="epoch", help='"epoch" or a number of batches')
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args(argv)
    save_freq = args.save_freq if args.save_freq == "epoch" else int(args.save_freq)

    import keras

    from survivor.trainers.contract import report_progress

    strategy = workload.strategy()
    with strategy.scope():
        model, optimizer = workload.model_and_optimizer()
        model.compile(
            optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False
        )
    model.build((None, workload.HPARAMS["features"]))  # BackupAndRestore needs a built model
    spe = args.steps_per_epoch

    class Steps(keras.callbacks.Callback):
        """Pauses after each batch and reports the global step (before BackupAndRestore may save)."""

        epoch = 0

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            workload.pause(args.step_seconds)
            report_progress(self.epoch * spe + batch + 1)

    class RestoreClock(keras.callbacks.Callback):
        started = 0.0

        def __init__(self, end: bool):
            super().__init__()
            self.end = end

        def on_train_begin(self, logs=None):
            if not self.end:
                RestoreClock.started = time.perf_counter()
            else:
                workload.note(
                    restore=time.perf_counter() - RestoreClock.started,
                    initial_epoch=int(getattr(self.model, "_initial_epoch", None) or 0),
                )

    backup = keras.callbacks.BackupAndRestore(backup_dir=args.backup_dir, save_freq=save_freq)
    model.fit(
        workload.dataset(),
        epochs=args.train_steps // spe,
        steps_per_epoch=spe,
        verbose=0,
        callbacks=[RestoreClock(False), Steps(), backup, RestoreClock(True)],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
