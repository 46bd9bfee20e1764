"""Stand-ins only the tests and the benchmarks use, kept out of the installed package.

- `fault_proxy.FaultProxy`: a hostile network between the storage client and fake-gcs-server (429,
  503, resets, stalls, truncated bodies), and Cloud Storage IAM's 403s for a granted role;
- `chaos`: the reliability harness (`python -m benchmarks.chaos`, tests/test_chaos.py): random
  SIGKILLs, damaged manifests, full disks and a dripping metadata server against real agents.

Both import the product's public names and survivor/local/'s stand-ins; nothing in survivor/ imports
them. The repository's root is on the path of the suite (`python -m pytest`) and of the benchmarks
(`python -m benchmarks.<name>`), which is where they run.
"""
