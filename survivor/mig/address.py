"""Where a job's group is (`JobAddress`), and the one error for what cannot be done to it as asked.

>>> JobAddress("cifar10", zone="us-west1-b").group()
GroupRef(project='my-project', name='cifar10', zone='us-west1-b', region=None)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from survivor.cloud.compute import ComputeError, GroupRef, PROJECT_HINT, find_project, location_problems


#: A callback that shows the operator one line.
Say = Callable[[str], None]


def silent(line: str) -> None:
    """Says nothing: the default `say`."""


class RequestError(ComputeError):
    """What the operator asked of a job's group cannot be done as asked: one sentence with the fix.

    A name Compute Engine refuses, a zone that is a region, an instance without its zone, a group that
    exists with another template, a VM that does not come up.
    """


@dataclass(frozen=True)
class JobAddress:
    """Where a job's group is: its name, project (default from the environment), zone or region.

    `instance` names a standalone VM instead of the group (it needs its zone).
    """

    name: str | None
    project: str | None = None
    zone: str | None = None
    region: str | None = None
    instance: str | None = None

    @property
    def flag(self) -> str:
        """The flag that names the group, for the next command a message suggests: `--zone Z` or `--region R`."""
        return f"--zone {self.zone}" if self.zone else f"--region {self.region}"

    @property
    def place(self) -> str:
        """`zone Z` or `region R`, for the sentences that report on the group."""
        return f"zone {self.zone}" if self.zone else f"region {self.region}"

    def resolved_project(self) -> str:
        """The project; RequestError when neither given nor set in the environment."""
        project = find_project(self.project)
        if not project:
            raise RequestError(PROJECT_HINT)
        return project

    def group(self) -> GroupRef:
        """The job's group; RequestError unless exactly one of zone and region is given, and well formed."""
        project = self.resolved_project()
        if bool(self.zone) == bool(self.region):
            raise RequestError("zone/region: give exactly one of --zone (zonal MIG) or --region (regional MIG)")
        problems = location_problems(self.zone, self.region)
        if problems:
            raise RequestError(problems[0])
        return GroupRef(project, self.name or "", zone=self.zone, region=self.region)

    def instance_zone(self) -> str:
        """The zone of the standalone instance (`instance`): `zone`, which must be a zone."""
        problems = ([] if self.zone else [f"--instance {self.instance}: give its --zone too"]) + location_problems(
            self.zone, None, regional=False
        )
        if problems:
            raise RequestError(problems[0])
        return self.zone or ""
