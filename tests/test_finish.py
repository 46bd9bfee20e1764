"""What a finished agent does with its VM: chosen by a pure function of on_finish and created-by."""

import pytest

from survivor.agent.finish import DeleteInstance, KeepAlive, LeaveGroup, StopInstance, choose_finisher
from survivor.metadata import InstanceIdentity

IN_A_MIG = "projects/123/zones/us-west1-b/instanceGroupManagers/cifar10-managed"
IN_A_REGIONAL_MIG = "projects/123/regions/us-west1/instanceGroupManagers/cifar10-managed"


def identity(created_by=None):
    return InstanceIdentity(project="p", zone="us-west1-b", name="cifar10-managed-x1z2", created_by=created_by)


@pytest.mark.parametrize("on_finish", ["auto", "leave-group", "stop", "delete"])
@pytest.mark.parametrize("created_by", [IN_A_MIG, IN_A_REGIONAL_MIG])
def test_inside_a_mig_every_ending_but_keep_alive_leaves_the_group(on_finish, created_by):
    """A MIG recreates a VM stopped or deleted by anyone but itself: stop/delete would loop."""
    finisher = choose_finisher(on_finish, identity(created_by))
    assert isinstance(finisher, LeaveGroup) and finisher.group.name == "cifar10-managed"


@pytest.mark.parametrize(
    "on_finish, expected",
    [
        ("auto", StopInstance),
        ("leave-group", StopInstance),
        ("stop", StopInstance),
        ("delete", DeleteInstance),
        ("keep-alive", KeepAlive),
    ],
)
def test_a_standalone_vm_does_what_on_finish_says(on_finish, expected):
    assert type(choose_finisher(on_finish, identity())) is expected


def test_keep_alive_keeps_a_mig_vm_as_it_is():
    assert isinstance(choose_finisher("keep-alive", identity(IN_A_MIG)), KeepAlive)


def test_the_units_agent_is_root_and_powers_the_vm_off_itself():
    import os
    import re

    from survivor.agent.finish import power_off_plan

    assert power_off_plan(systemd=True, euid=0) == "systemctl"  # the unit names no User=: root
    assert power_off_plan(systemd=True, euid=1001) == "not-root"  # logind refuses a power-off to a service's user
    assert power_off_plan(systemd=False, euid=0) == "none"
    unit = open(os.path.join(os.path.dirname(__file__), "..", "survivor", "startup", "survivor-agent.service")).read()
    assert not re.search(r"^User=", unit, re.M) and not re.search(r"^ExecStopPost=", unit, re.M)
