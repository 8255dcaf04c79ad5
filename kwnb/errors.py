"""Errors a user should see as one line, with no traceback: bad options, unknown names, a job that
could not start.

Each also derives from the builtin error it replaces (ValueError, KeyError, ...), so code written
against those keeps working; the magics and the CLI catch `KwnbError` alone and print its message.
"""
from __future__ import annotations


class KwnbError(Exception):
    """A mistake or a refusal that one sentence explains; its str() is that sentence."""

    def __str__(self) -> str:  # KeyError would quote its message
        return str(self.args[0]) if self.args else ""


class OptionError(KwnbError, ValueError):
    """An option, script or argument that cannot work (checked before anything starts)."""


class UnknownRun(KwnbError, KeyError):
    """No run of that name in this process."""


class UnknownTask(KwnbError, IndexError):
    """A task position or name the run does not have."""


class LaunchError(KwnbError, RuntimeError):
    """The tasks could not be started here (a missing scheduler, a rejected job); the message says why."""


class NotPossible(KwnbError, RuntimeError):
    """A control the run cannot carry out now (restart an ended run, kill one task under Slurm)."""
