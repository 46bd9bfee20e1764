"""What an operator does to a job, on Google Cloud: one module per act, each built on `cloud/`'s
clients and rules and on the job dir (`jobdir/`).

`group` (a job's template and its single-instance group: make, stop, start, delete, status, the
switch between Spot and on-demand, a shape's template), `placement` (capacity wherever it is: the
move to the next region or machine shape), `deadline` (Spot or on-demand, by the deadline),
`watch` (one look at a job while no VM runs: the deadline and placement decided from anywhere),
`watch_deploy` (that look as a Cloud Run job on a Cloud Scheduler trigger), `report` (goodput,
badput and cost beside on-demand), `image` (survivor's boot image and the staged install) and
`preflight` (what a job will need, checked before anything is created).
"""
