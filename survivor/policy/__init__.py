"""The decisions the operator's commands and the VM's agent both take, as plain functions over what was
read: the deadline policy (Spot, on-demand or flex-start), placement (whether and where a job moves,
and the bet a move is), the budget's standing and what a job cost. Nothing here changes a group or
writes a record: survivor/group/ acts on what these decide.
"""
