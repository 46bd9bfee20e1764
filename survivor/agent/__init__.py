"""The in-VM daemon, `survivor agent`: one boot of a training VM, from the job spec to a safe end.

`boot` tells the story of one boot and is the place to start reading. Around it, one concept per
module: `trainer` (launching and supervising the trainer process), `delivery` (its code), `gpus`,
`mirror` (committing its checkpoints while it trains), `maintenance` (a maintenance notice's save),
`notice` (how the VM is told it goes), `ending` (how an attempt ended, decided from its facts) and
`finish` (what becomes of the VM once the job is DONE or FAILED).
"""
