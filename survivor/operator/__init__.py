"""What an operator does to a job, on Google Cloud: one module per act, each built on `cloud/`'s
clients and rules, on the job dir (`jobdir/`), on the decisions the agent shares (`policy/`) and on
what the agent does to a group too (`mig/`: the group made, the deadline's switch, the move).

`template` (a job's instance template: described, preflight, its boot image chosen or built),
`group` (its group stopped, started, deleted; the VM's serial port), `status` (everything `survivor
status` shows, as a `JobStatus`), `budget` (the watch's stop at the budget, `start --budget`),
`watch` (one look at a job while no VM runs: the deadline and placement decided from anywhere),
`watch_deploy` (that look as a Cloud Run job on a Cloud Scheduler trigger), `notices` (what a look
tells the job's webhooks), `report` (goodput, badput and cost beside on-demand, as Markdown and a
timeline), `image` (survivor's boot image and the staged install) and `preflight` (what a job will
need, checked before anything is created). The VM never imports this package.
"""
