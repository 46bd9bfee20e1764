"""Google Cloud as survivor uses it: one module per service, each a thin client plus the service's rules.

`compute` (the Compute Engine client: templates, groups, instances, images), `hardware` (one record
per GPU type and per machine family), `machines` (the rules of machine types and GPUs the
API documents but does not check in its schema), `template` (a job's instance template body),
`permissions` (what each Cloud Storage role grants), `vertex` (Vertex AI custom jobs), `runtimes`
(the Python of each image), `catalog` and `pricing` (the Cloud Billing Catalog's prices), and
`endpoints` (each client's endpoint: Google's, or a stand-in named by a `SURVIVOR_*_ENDPOINT`
variable). What an operator does with them to a job (its group, deadline, moves, report, image,
preflight) is survivor/operator/. The metadata server a VM reads its job and notices from is no
API of the cloud's but the VM's own, which the trainers read too: survivor/metadata.py.
"""
