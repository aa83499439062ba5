"""Driving a ServerSession in process, as the transport would: the helpers the in-process tests share."""

from __future__ import annotations

from breaker.jobs import DurableJob
from breaker.session import ServerSession


def settle(session: ServerSession) -> None:
    """What the transport does with the jobs that need no I/O here: an operator's change is saved at
    once (its reply released); then every pending state frame and snapshot part is built."""
    while session.jobs:
        job = session.jobs.popleft()
        if isinstance(job, DurableJob):
            session.complete(job.channel, job.slot, job.data)
    while session.pump():
        pass
