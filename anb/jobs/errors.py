"""The error a stage raises to tell the worker how a job failed."""
from __future__ import annotations


class JobError(RuntimeError):
    """A stage's failure, recorded as the job's error as it reads (it names the device and the
    step). ``transient``: a retry may help (the job goes back to the queue while attempts are
    left); otherwise it fails at once."""

    @property
    def transient(self) -> bool:
        return False
