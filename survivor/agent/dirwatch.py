"""Wake-ups when files in the trainer's job dir change: inotify on Linux, nothing elsewhere.

    >>> changes = DirChanges("/var/lib/survivor/job")
    >>> changes.available                 # False where inotify is missing (macOS laptops)
    True
    >>> changes.wait(0.5)                 # True as soon as a file in it is written, renamed, removed
    True
    >>> changes.close()

After a notice the mirror wakes on these instead of scanning on a 2 ms clock: a checkpoint renamed
into place is seen when it lands instead of at the clock's next tick, and no scan runs while
nothing changes. Writes wake it too (the kernel merges repeated ones while they are unread), so a file being
written is still checksummed as it grows. Directories created under the job dir (TensorFlow writes a
checkpoint's shards into `<prefix>_temp/`) are watched as they appear. inotify is a hint, never the
only way: the mirror still scans on a slower clock, for anything it cannot see (a queue overflow, a
file system without events).
"""

from __future__ import annotations

import os

from survivor import log as logs

log = logs.get("dirwatch")

try:  # Linux only; the mirror falls back to scanning on a clock without it
    from inotify_simple import INotify, flags
except ImportError:  # pragma: no cover - exercised on non-Linux hosts
    INotify = None  # type: ignore[assignment,misc]
    flags = None  # type: ignore[assignment]


def _mask() -> int:
    return (flags.MODIFY | flags.CLOSE_WRITE | flags.MOVED_TO | flags.MOVED_FROM | flags.CREATE
            | flags.DELETE | flags.DELETE_SELF)


class DirChanges:
    """Changes under `root` (the directory and every directory below it)."""

    def __init__(self, root: str):
        self.root = root
        self._inotify = None
        self._dirs: dict[int, str] = {}
        if INotify is None:
            return
        try:
            self._inotify = INotify()
            for dirpath, _, _ in os.walk(root):
                self._watch(dirpath)
        except OSError as exc:  # no inotify in this kernel or container, or out of watches
            log.info("no file change events; scanning on a clock instead", error=str(exc))
            self.close()

    @property
    def available(self) -> bool:
        return self._inotify is not None

    def _watch(self, path: str) -> None:
        assert self._inotify is not None
        try:
            self._dirs[self._inotify.add_watch(path, _mask())] = path
        except FileNotFoundError:  # gone again before we got to it
            pass

    def wait(self, timeout: float) -> bool:
        """Blocks up to `timeout` seconds for changes; True if there were any. Without inotify it
        returns False at once: the caller's clock is the only wake-up then."""
        if self._inotify is None:
            return False
        events = self._inotify.read(timeout=max(0, int(timeout * 1000)))
        for event in events:
            if event.mask & flags.ISDIR and event.mask & (flags.CREATE | flags.MOVED_TO):
                parent = self._dirs.get(event.wd)
                if parent is not None:
                    self._watch(os.path.join(parent, event.name))
        return bool(events)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
