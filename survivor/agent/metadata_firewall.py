"""The VM's metadata server, closed to one user: an iptables rule on the owner of the connecting socket.

    >>> close_to(pwd.getpwnam("bob").pw_uid)   # as root: iptables -C, then -I only if it is missing

Any process on a VM may ask the metadata server for the token of the VM's service account; the
trainer is the job author's code, so its user gets none (docs/trainer-contract.md, "The trainer's
Google credentials"). startup.sh adds this rule for `survivor-trainer` before the agent starts
(its `conceal_metadata`, the same words); the agent, as root, adds it for a spec's own `user`
(`trainer.close_metadata_server`). The rule resets TCP to 169.254.169.254 ports 80 and 443 from
sockets the user owns (iptables-extensions(8), module "owner": "--uid-owner: Matches if the packet
socket's file structure (if it has one) is owned by the given user", OUTPUT chain); port 53 of the
same address, the VM's DNS resolver, stays open. Rules are gone after a reboot, when both add them
again. iptables runs from an argv, never a shell.
"""

from __future__ import annotations

import shutil
import subprocess

#: metadata.google.internal (https://cloud.google.com/compute/docs/metadata/querying-metadata).
METADATA_IP = "169.254.169.254"
#: The most an iptables call may take: `-w` waits for the xtables lock another caller holds.
IPTABLES_SECONDS = 30.0


class FirewallError(Exception):
    """The rule could not be checked or added; says why (no iptables, or what iptables said)."""


def rule(uid: int) -> list[str]:
    """Pure: the rule, as the words after `iptables -w -C` or `-I`, that resets `uid`'s TCP
    connections to the metadata server (startup.sh's `conceal_metadata` builds the same words)."""
    return [
        "OUTPUT",
        "-d",
        f"{METADATA_IP}/32",
        "-p",
        "tcp",
        "-m",
        "multiport",
        "--dports",
        "80,443",
        "-m",
        "owner",
        "--uid-owner",
        str(uid),
        "-j",
        "REJECT",
        "--reject-with",
        "tcp-reset",
    ]


def close_to(uid: int) -> None:
    """Adds the rule for `uid` unless it is there already (-C before -I: one rule however often
    this runs). Needs root. Raises FirewallError when there is no iptables or it refuses."""
    iptables = shutil.which("iptables", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if iptables is None:
        raise FirewallError("no iptables on this image")
    if _iptables(iptables, "-C", uid).returncode == 0:
        return
    added = _iptables(iptables, "-I", uid)
    if added.returncode != 0:
        said = added.stderr.strip().splitlines()
        raise FirewallError(f"iptables -I exited {added.returncode}: {said[-1] if said else 'no message'}")


def _iptables(iptables: str, action: str, uid: int) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [iptables, "-w", action, *rule(uid)], capture_output=True, text=True, timeout=IPTABLES_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FirewallError(f"iptables {action}: {exc}") from None
