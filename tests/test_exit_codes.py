"""One exit-code table for every CLI: each of the project's errors maps to one code, whichever tool
meets it (agent.cli.boundary.package_failure)."""

from __future__ import annotations

import pytest

from agent.cli import EXIT_BAD_INPUT, EXIT_CONFLICT, EXIT_FAILED, EXIT_UNAVAILABLE
from agent.cli.boundary import exit_code_for_status, package_failure
from evaluation.errors import EndpointUnavailable, EvalError, UnknownRun
from serving import errors as se
from serving.local.cluster import ClusterError
from serving.local.embedded import EmbeddedError
from training import errors as te

CODES = [
    # serving's errors, by their HTTP status
    (se.AdapterExists, EXIT_CONFLICT), (se.AdapterNotFound, EXIT_CONFLICT), (se.NoRollbackTarget, EXIT_CONFLICT),
    (se.NoCanary, EXIT_CONFLICT), (se.AdapterRefConflict, EXIT_CONFLICT),
    (se.AdapterStoreUnavailable, EXIT_UNAVAILABLE), (se.ReplicaUnavailable, EXIT_UNAVAILABLE),
    (se.BadAdapterName, EXIT_BAD_INPUT), (se.AdapterInvalid, EXIT_BAD_INPUT), (se.InvalidCanary, EXIT_BAD_INPUT),
    (se.BadConfig, EXIT_BAD_INPUT), (se.BadRequest, EXIT_BAD_INPUT), (se.Unauthorized, EXIT_BAD_INPUT),
    (EmbeddedError, EXIT_FAILED), (ClusterError, EXIT_FAILED),
    # evaluation's and training's, by their exit_code
    (EvalError, EXIT_BAD_INPUT), (EndpointUnavailable, EXIT_UNAVAILABLE),
    (te.TrainingError, EXIT_FAILED), (te.JobError, EXIT_FAILED), (te.InvalidSpec, EXIT_BAD_INPUT),
    (te.PublishError, EXIT_BAD_INPUT), (te.UnknownJob, EXIT_BAD_INPUT), (te.ClusterAuthRequired, EXIT_BAD_INPUT),
    (te.ClusterUnavailable, EXIT_UNAVAILABLE),
]


@pytest.mark.parametrize("error, code", CODES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_each_error_has_one_code(error, code):
    assert package_failure(error("what went wrong")) == (code, "what went wrong")


def test_unknown_run_and_other_exceptions():
    assert package_failure(UnknownRun("r-1")) == (EXIT_BAD_INPUT, "no run 'r-1'")
    assert package_failure(ValueError("x")) is None  # left to the tool's own map, then the common one


@pytest.mark.parametrize("status, code", [(400, EXIT_BAD_INPUT), (401, EXIT_BAD_INPUT), (413, EXIT_BAD_INPUT),
                                          (422, EXIT_BAD_INPUT), (404, EXIT_CONFLICT), (409, EXIT_CONFLICT),
                                          (503, EXIT_UNAVAILABLE), (504, EXIT_UNAVAILABLE), (500, EXIT_FAILED)])
def test_http_statuses(status, code):
    assert exit_code_for_status(status) == code
