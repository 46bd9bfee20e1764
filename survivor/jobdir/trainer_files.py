"""Opening the files a trainer wrote, by an agent that may be root: never through a link the trainer
could have made, never blocked on a FIFO.

    >>> import pathlib, tempfile
    >>> job = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (job / "ckpt-9.index").write_bytes(b"9")
    >>> fd = open_regular(str(job / "ckpt-9.index"))
    >>> os.read(fd, 8), os.close(fd)
    (b'9', None)

On a VM the agent runs as root and the trainer as another user, who owns its local job dir and may
swap any file or directory in it for a link (to a root-only file, which the agent would then
upload to the job dir and restore into the trainer's hands) or for a FIFO (on which an open blocks
for ever), between the agent's listing and its read. `open_regular` walks the path one directory at
a time from `/`: a link is followed only in a directory that root (or the agent's own user) alone
may write, where nobody else could have made it; below the first directory another user may write
(the trainer's local job dir) no link is followed (O_NOFOLLOW on each part: ELOOP or ENOTDIR), and
the file itself is never a link. It is opened without blocking and must be a regular file.
"""

from __future__ import annotations

import errno
import os
import stat

#: A directory to walk through, never read: O_PATH needs no read permission on it (Linux).
_DIRECTORY = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


class Refused(OSError):
    """The path holds a link where another user could have made it (ELOOP, ENOTDIR), or what is
    not a regular file (EINVAL): it was not opened, or was closed again at once."""


def open_regular(path: str) -> int:
    """A read-only descriptor of the regular file at `path` (the caller closes it). Raises Refused
    for a link where another user could have made it or what is not a regular file (a FIFO, a
    device, a directory), else what opening it raised (FileNotFoundError, PermissionError...)."""
    parts = [part for part in os.path.abspath(path).split("/") if part]
    if not parts:
        raise Refused(errno.EINVAL, "not a regular file", path)
    euid = os.geteuid()
    fd = os.open("/", _DIRECTORY)
    try:
        trusted = _only_writable_by(os.fstat(fd), euid)
        for part in parts[:-1]:
            below = _open(part, _DIRECTORY | (0 if trusted else os.O_NOFOLLOW), fd, path)
            os.close(fd)
            fd = below
            trusted = trusted and _only_writable_by(os.fstat(fd), euid)
        file_fd = _open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, fd, path)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
        os.close(file_fd)
        raise Refused(errno.EINVAL, "not a regular file", path)
    return file_fd


def open_file(path: str):
    """`open_regular` as a binary file object (`with open_file(path) as f:`)."""
    return os.fdopen(open_regular(path), "rb")


def _open(name: str, flags: int, dir_fd: int, path: str) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link met with O_NOFOLLOW, or a file where a dir was
            raise Refused(
                exc.errno, "a link another user could have made (not followed), or not a directory", path
            ) from None
        raise


def _only_writable_by(st: os.stat_result, euid: int) -> bool:
    """Whether only root or `euid` may change this directory's entries (make a link in it)."""
    return st.st_uid in (0, euid) and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
