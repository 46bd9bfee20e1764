"""Delivering the trainer's code, the recipe's third component, before it starts.

Three ways, chosen by the spec's trainer section:

- already importable (on the image, or a builtin): nothing to do;
- `git_url` (+ `git_ref`): cloned into the work dir on the first boot and updated on every later
  one, as the recipe's startup script does; the checkout goes on `PYTHONPATH` and is the cwd;
- `package` (`gs://.../trainer-0.1.tar.gz` or a wheel): fetched and installed with pip into the work
  dir, like Cloud ML Engine's `--packages`, and put on `PYTHONPATH`.

Every command is an argv list; a value from metadata is never part of a shell line, and `--`
separates options from a URL so a URL cannot pose as an option.
"""

from __future__ import annotations

import os
import posixpath
import subprocess
import sys
from dataclasses import dataclass, field

from survivor import log as logs
from survivor.spec import TrainerSpec

log = logs.get("delivery")


class DeliveryError(Exception):
    """The trainer's code could not be fetched or installed. Says what failed."""


@dataclass
class Delivered:
    """Where the delivered code is: extra PYTHONPATH entries and a working directory."""

    pythonpath: list[str] = field(default_factory=list)
    cwd: str | None = None


def git_commands(url: str, ref: str | None, checkout: str, exists: bool) -> list[list[str]]:
    """Pure decision: the git argv lists that clone or update `checkout` to `ref`."""
    if not exists:
        cmds = [["git", "clone", "--quiet", "--", url, checkout]]
    else:
        cmds = [["git", "-C", checkout, "fetch", "--quiet", "--tags", "--", "origin"]]
    if ref:
        cmds.append(["git", "-C", checkout, "checkout", "--quiet", "--detach", ref])
        cmds.append(["git", "-C", checkout, "reset", "--quiet", "--hard", ref])
    elif exists:
        cmds.append(["git", "-C", checkout, "reset", "--quiet", "--hard", "origin/HEAD"])
    return cmds


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise DeliveryError(f"{what} failed (exit {result.returncode}): {result.stderr.strip()[-500:]}")


def deliver(trainer: TrainerSpec, workdir: str, fetch=None) -> Delivered:
    """Fetches the trainer's code into `workdir` as the spec says. `fetch(url, local)` downloads a package."""
    delivered = Delivered()
    if trainer.git_url:
        checkout = os.path.join(workdir, "trainer-src")
        exists = os.path.isdir(os.path.join(checkout, ".git"))
        for argv in git_commands(trainer.git_url, trainer.git_ref, checkout, exists):
            _run(argv, "fetching the trainer with git")
        log.info("trainer code from git", url=trainer.git_url, ref=trainer.git_ref or "default branch")
        delivered.pythonpath.append(checkout)
        delivered.cwd = checkout
    if trainer.package:
        packages = os.path.join(workdir, "packages")
        os.makedirs(packages, exist_ok=True)
        local = os.path.join(packages, posixpath.basename(trainer.package))
        if fetch is None:
            raise DeliveryError("no way to fetch the package")
        fetch(trainer.package, local)
        target = os.path.join(workdir, "trainer-site")
        _run([sys.executable, "-m", "pip", "install", "--quiet", "--upgrade", "--target", target, "--", local],
             "installing the trainer package")
        log.info("trainer package installed", package=trainer.package)
        delivered.pythonpath.append(target)
    return delivered
