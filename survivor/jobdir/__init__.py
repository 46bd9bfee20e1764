"""The job dir, the single source of truth of a job: checkpoints, who trains it, and how it went.

    gs://BUCKET/PATH/ (or a local directory)
      ckpt-*, events.*           the trainer's own files, mirrored
      survivor/blobs/            checkpoint files, content-addressed    (store.py)
      survivor/snapshots/*.json  manifests: a commit is its manifest     (store.py)
      survivor/LEASE             the one agent that may commit            (lease.py)
      survivor/attempts/*.json   one record per boot                     (journal.py)
      survivor/DONE, FAILED      the end                                  (journal.py)
      survivor/claims/*.json     one look acts: a switch or a move claimed (claims.py)

`storage.py` is the one way to the bucket (Cloud Storage or a local directory), `snapshot.py` scans
a trainer's checkpoints (`chunks.py` cuts large files into parts), `status.py` reads it all back
for `survivor status`. Nothing here knows the
agent: it imports only survivor's log and retry policies.
"""
