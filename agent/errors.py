"""Errors of the agent package, under one root."""

from __future__ import annotations


class AgentError(Exception):
    """Root of the agent package's errors."""


class PolicyError(AgentError):
    """The policy could not produce a reply; ``transient`` says whether a retry may help."""

    def __init__(self, message: str, *, transient: bool, status_code: int | None = None):
        super().__init__(message)
        self.transient = transient
        self.status_code = status_code
        self.retry_after_s: float | None = None

    def __reduce__(self):  # keep picklable across processes (Ray, multiprocessing)
        return (_rebuild_policy_error, (str(self), self.transient, self.status_code))


def _rebuild_policy_error(message: str, transient: bool, status_code: int | None) -> PolicyError:
    return PolicyError(message, transient=transient, status_code=status_code)


class RetryBudgetExhausted(PolicyError):
    """Transient failures went on past the retry budget."""

    def __init__(self, message: str):
        super().__init__(message, transient=False)

    def __reduce__(self):
        return (RetryBudgetExhausted, (str(self),))
