"""Optional parts of the install: what each command needs beyond the core, and the one line that
says how to get it when it is missing.

    >>> require("googleapiclient", "operator", "survivor's Compute fake")   # raises MissingExtra if absent

The core install (`pip install -e .`) runs the agent and every operator command against Google
Cloud; the extras in pyproject.toml add TensorFlow (the built-in trainers, the demo), the stand-ins
of the rehearsal (`operator`: the Compute fake's discovery document, fake-gcs-server, the billing,
Run and Scheduler clients) and the Cloud Storage emulator alone (`gcs-emulator`). A command that needs
a part that is missing ends with one line naming the exact install command, never a traceback.
"""

from __future__ import annotations

import importlib.util


class MissingExtra(ImportError):
    """An optional part is not installed; the message says which command installs it."""


def install_command(extra: str) -> str:
    """The command that installs `extra` into this environment, from survivor's checkout (the
    distribution survivor-train is not served by the package index; `pip install survivor` is
    another project)."""
    return f"pip install -e '.[{extra}]' (in survivor's checkout)"


def require(module: str, extra: str, purpose: str) -> None:
    """Raises MissingExtra unless `module` can be imported: `purpose` needs it, `extra` installs it."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingExtra(
            f"{purpose} needs the Python package {module!r}, which this install lacks: {install_command(extra)}"
        )
