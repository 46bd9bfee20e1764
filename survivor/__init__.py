"""survivor: TensorFlow training on Spot VMs that survives preemption and finishes exactly once."""

__version__ = "0.1.0"
