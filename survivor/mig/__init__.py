"""A job's managed instance group on Compute Engine, as the operator's commands and the VM's agent
both act on it: the group made and found (`make.py`), the job's other templates, its deadline
twins and its shapes (`templates.py`), the deadline's switch between Spot, on-demand and
flex-start (`switch.py`), the move to capacity elsewhere (`move.py`) and the state disks a move
leaves (`state_disks.py`). What to do is survivor/policy/'s; this part does it.

The agent imports it at boot (a switch the deadline policy decides, a move its region's
preemptions call for, a move a cut look left); so it imports nothing of survivor/operator/, whose
packages the VM's lock does not carry.
"""
