"""Stand-ins for Google Cloud on 127.0.0.1, and a VM made of processes, for tests, the demo and `survivor emulate`.

- `metadata_server.MetadataServer`: the GCE metadata server (hanging GETs, guest attributes, faults);
- `gcs.StorageEmulator`: fake-gcs-server (Cloud Storage's JSON API);
- `compute_server.ComputeServer`: Compute Engine's REST API, bodies validated against its discovery
  document and the rules in `survivor.cloud.machines`;
- `vertex_server`, `logging_server`, `bucket_iam`: Vertex AI, Cloud Logging and bucket IAM;
- `instance.LocalInstance`: a Spot VM (an agent process, its metadata, a boot disk);
  `simulator.Simulator`: a MIG of them; `boot.SandboxRoot`: startup.sh run for real in a sandbox root;
  `demo`: `survivor demo`. (The chaos harness and the fault proxy, which only the tests and the
  benchmarks use, are harness/'s, outside the installed package.)

Of the product only the local commands (`survivor/commands/local.py`: demo, simulate, emulate) import
this package; it imports only the product's public names.
"""
