"""Delivering the trainer's code, the recipe's third component, before it starts.

Three ways, chosen by the spec's trainer section:

- already importable (on the image, or a builtin): nothing to do;
- `git_url` (+ `git_ref`): cloned into the work dir on the first boot and updated on every later
  one, as the recipe's startup script does; the checkout goes on `PYTHONPATH` and is the cwd. A
  checkout left by an earlier boot is updated only when it fetches from the spec's URL and is the
  agent's own; otherwise (`trainerGitPath` changed, a checkout some other user could write) it is
  removed and cloned afresh;
- `package` (`gs://.../trainer-0.1.tar.gz` or a wheel, or a local path): fetched through the job dir's
  own storage (`open_storage`, so gs:// and local paths are told apart in one place) and installed
  with pip into the work dir, like Cloud ML Engine's `--packages`, and put on `PYTHONPATH`. A package
  that is not there is a DeliveryError; any other StorageError (a permission, the network) goes up
  as it is, to be judged like the job dir's own.

Every command is an argv list; a value from metadata is never part of a shell line, and `--`
separates options from a URL so a URL cannot pose as an option.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field

from survivor import log as logs
from survivor.jobdir.storage import NOT_FOUND, StorageError, open_storage
from survivor.spec import TrainerSpec

log = logs.get("delivery")


class DeliveryError(Exception):
    """The trainer's code could not be fetched or installed. Says what failed."""


@dataclass
class Delivered:
    """Where the delivered code is: extra PYTHONPATH entries and a working directory."""

    pythonpath: list[str] = field(default_factory=list)
    cwd: str | None = None


@dataclass(frozen=True)
class GitPlan:
    """What to do to `checkout`: remove what is there first (`fresh`), then run `commands`."""

    fresh: bool
    commands: list[list[str]]


def git_plan(url: str, ref: str | None, checkout: str, origin: str | None) -> GitPlan:
    """Pure decision: how to bring `checkout` to `ref` of `url`.

    `origin` is the URL the checkout left by an earlier boot fetches from, or None when there is no
    checkout the agent can trust (none, not a git checkout, not the agent's own). Only a checkout of
    the same URL is updated; any other is replaced by a fresh clone, so a changed `trainerGitPath`
    is followed rather than the old repository fetched again.
    """
    fresh = origin != url
    if fresh:
        cmds = [["git", "clone", "--quiet", "--", url, checkout]]
    else:
        cmds = [["git", "-C", checkout, "fetch", "--quiet", "--tags", "--", "origin"]]
    if ref:
        cmds.append(["git", "-C", checkout, "checkout", "--quiet", "--detach", ref])
        cmds.append(["git", "-C", checkout, "reset", "--quiet", "--hard", ref])
    elif not fresh:
        cmds.append(["git", "-C", checkout, "reset", "--quiet", "--hard", "origin/HEAD"])
    return GitPlan(fresh, cmds)


def _run(argv: list[str], what: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise DeliveryError(f"{what} failed (exit {result.returncode}): {result.stderr.strip()[-500:]}")
    return result.stdout


def _own_dir(path: str) -> bool:
    """True when `path` is a directory (not a link) of the agent's own user: one another user
    could have written is not run by git or pip as the agent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def _remove(path: str) -> None:
    """Removes what is at `path` (a tree, a file or a link), following no link."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def checkout_origin(checkout: str) -> str | None:
    """The URL an existing checkout fetches from, or None when it cannot be trusted or read."""
    if not (_own_dir(checkout) and _own_dir(os.path.join(checkout, ".git"))):
        return None
    result = subprocess.run(
        ["git", "-C", checkout, "config", "--get", "remote.origin.url"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else None


def fetch_package(url: str, local: str) -> None:
    """Downloads the package at `url` (`gs://BUCKET/PATH`, `file:///PATH` or `/PATH`) to `local`."""
    where, name = posixpath.split(url)
    open_storage(where).download([(name, local)])


def deliver(trainer: TrainerSpec, workdir: str, fetch=fetch_package) -> Delivered:
    """Fetches the trainer's code into `workdir` as the spec says; returns where it is.
    `fetch(url, local)` downloads a package."""
    delivered = Delivered()
    if trainer.git_url:
        checkout = os.path.join(workdir, "trainer-src")
        origin = checkout_origin(checkout)
        plan = git_plan(trainer.git_url, trainer.git_ref, checkout, origin)
        if plan.fresh and os.path.lexists(checkout):
            log.info("replacing the earlier checkout", was=origin or "not the agent's own", url=trainer.git_url)
            _remove(checkout)
        for argv in plan.commands:
            _run(argv, "fetching the trainer with git")
        log.info("trainer code from git", url=trainer.git_url, ref=trainer.git_ref or "default branch")
        delivered.pythonpath.append(checkout)
        delivered.cwd = checkout
    if trainer.package:
        packages = os.path.join(workdir, "packages")
        target = os.path.join(workdir, "trainer-site")
        for path in (packages, target):  # pip writes there as the agent: never where another user could
            if os.path.lexists(path) and not _own_dir(path):
                _remove(path)
        os.makedirs(packages, exist_ok=True)
        local = os.path.join(packages, posixpath.basename(trainer.package))
        try:
            fetch(trainer.package, local)
        except StorageError as exc:
            if exc.reason != NOT_FOUND:
                raise
            raise DeliveryError(f"the trainer package is not there: {exc}") from exc
        _run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--upgrade", "--target", target, "--", local],
            "installing the trainer package",
        )
        log.info("trainer package installed", package=trainer.package)
        delivered.pythonpath.append(target)
    return delivered
