"""The alternatives to survivor, each run as its own code on survivor's MLP workload (benchmarks.goodput --own-code).

- `keras_backup`: Keras 3 `BackupAndRestore` with `model.fit`;
- `tf_handler`: TensorFlow's `PreemptionCheckpointHandler` with a custom loop, as its docstring shows;
- `recipe`: the survival-training recipe's `runner` (tests/recipe/wrapper/train.py, unchanged);
- `workload`: the model, data, devices and step pause they share with `survivor.trainers.mlp`;
- `run`: the driver (one VM at a time, the same seeded preemptions, real time) and the badput split.
"""
