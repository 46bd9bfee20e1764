"""Google Cloud as survivor uses it: one module per service, each a thin client plus the service's rules.

`metadata` (the metadata server a VM reads its job and notices from), `compute` (the Compute Engine
client: templates, groups, instances, images), `machines` (the rules of machine types and GPUs the
API documents but does not check in its schema), `template`, `group` and `image` (a job's template,
its single-instance group and survivor's boot image), `preflight` (what a job will need, checked
before anything is created), `permissions` (what each Cloud Storage role grants), `vertex` (Vertex AI
custom jobs), `runtimes` (the Python of each image), `pricing`, and `endpoints` (each client's endpoint:
Google's, or a stand-in named by a `SURVIVOR_*_ENDPOINT` variable).
"""
