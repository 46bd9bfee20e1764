"""The notice check a multi-worker trainer hands to TensorFlow's `PreemptionCheckpointHandler`.

    >>> poll = NoticePoll(stop, MetadataClient(timeout=retry.TRAINER_POLL.attempt_seconds, retrying=retry.once))
    >>> TerminationConfig(termination_watcher_fn=poll, ...)      # TensorFlow calls it once a second

TensorFlow's default watcher on a Compute Engine GPU VM reads only `instance/maintenance-event`, so
it never hears a Spot preemption; on a CPU VM the handler does nothing at all. This one answers True
once SIGTERM arrived or the metadata server says `instance/preempted` TRUE or a terminating
maintenance event (the same decision the agent makes, `survivor.metadata.notice_from_metadata`). It
never blocks for long and never raises: a machine without a metadata server is watched for SIGTERM
only, after three unanswered tries.

A maintenance event stops multi-worker training here (save, exit for a restart), where the agent on
one machine saves and trains on: the handler knows only "save, then exit", and a save across workers
is a collective they must all join at one step, which only the handler arranges.
"""

from __future__ import annotations

import sys

from survivor.metadata import WATCHED_KEYS, MetadataClient, MetadataError, notice_from_metadata
from survivor.trainers.contract import StopRequest

UNREACHABLE_TRIES = 3


class NoticePoll:
    """Callable: has this worker been told it is going away?"""

    def __init__(self, stop: StopRequest, metadata: MetadataClient | None):
        self.stop = stop
        self.metadata = metadata
        self.source: str | None = None
        self._answered = False
        self._failures = 0

    def __call__(self) -> bool:
        """True once this worker has heard a notice (and for ever after)."""
        if self.source is None and self.stop.requested:
            self.source = self.stop.signal_name or "signal"
        if self.source is None and self.metadata is not None:
            self.source = self._ask_metadata()
        return self.source is not None

    def _ask_metadata(self) -> str | None:
        metadata = self.metadata
        if metadata is None:
            return None
        try:
            for key in WATCHED_KEYS:
                source = notice_from_metadata(key, metadata.get_or(key, "") or "")
                self._answered = True
                if source:
                    return source
        except MetadataError as exc:
            self._failures += 1
            if not self._answered and self._failures >= UNREACHABLE_TRIES:
                print(
                    f"no metadata server at {metadata.host} ({exc.reason.split(' (')[0]}); watching SIGTERM only",
                    file=sys.stderr,
                    flush=True,
                )
                self.metadata = None
        return None
