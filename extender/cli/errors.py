"""Exit codes and the one exception type commands raise for a clean, traceback-free error."""

from __future__ import annotations

EXIT_OK = 0
EXIT_NO = 1
"""The answer is no: the workload does not fit, a descriptor is invalid."""
EXIT_INPUT = 2
"""Bad usage or bad input (malformed file, unknown kind)."""
EXIT_UNREACHABLE = 3
"""The API server could not be reached or refused the request."""


class CliError(Exception):
    """An error a person can act on; printed as ``error: <message>`` with its exit code."""

    def __init__(self, message: str, *, exit_code: int = EXIT_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code
