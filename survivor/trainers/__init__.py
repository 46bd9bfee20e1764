"""The trainer's side of the contract, and survivor's built-in trainers.

`contract.py` is all a Python trainer needs (SIGTERM to save and exit, SIGUSR1 to save and go on,
progress reports); `loop.py` is a resumable TensorFlow loop on it, used by `mlp.py` (the demo's)
and `cifar10.py` (the recipe's); `keras_fit.py` is the same for `model.fit`; `dummy.py` trains
nothing, for fast tests;
`cluster.py` reads a multi-worker cluster and `preemption.py` hears its notices; `registry.py` names
the built-in ones for the job spec (module, flags, save signal), importing nothing.
"""
