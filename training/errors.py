"""The training package's errors; ``exit_code`` is what ``maze-train`` returns for each (mapped once,
at the CLI's boundary)."""

from __future__ import annotations

from agent.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_UNAVAILABLE


class TrainingError(Exception):
    """Root of the training package's expected failures."""

    exit_code = EXIT_FAILED


class InvalidSpec(TrainingError):
    """A training spec (or a command's options) that does not parse or validate."""

    exit_code = EXIT_BAD_INPUT


class PublishError(TrainingError):
    """An exported step that cannot be published (missing export folder or step, bad adapter)."""

    exit_code = EXIT_BAD_INPUT


class JobError(TrainingError):
    """A job command failed (e.g. the cluster refused the submission)."""


class ClusterUnavailable(JobError):
    """No Ray cluster answers at the address."""

    exit_code = EXIT_UNAVAILABLE


class UnknownJob(JobError):
    """The cluster has no job with this submission id."""

    exit_code = EXIT_BAD_INPUT


class ClusterAuthRequired(JobError):
    """The cluster requires a Ray token the client does not send."""

    exit_code = EXIT_BAD_INPUT
