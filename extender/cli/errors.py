"""Exit codes, as kubectl's, and the one exception type commands raise for a clean,
traceback-free error.

kubectl exits 1 on every error (a bad flag, an unknown context, a missing object, an API
server that does not answer), and its question-answering commands use the codes as
``kubectl diff`` does: 0 yes, 1 no, above 1 no answer. Muster does the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

EXIT_OK = 0
EXIT_ERROR = 1
"""Any error: bad usage or input, unknown kind or context, the API server unreachable."""
EXIT_NO = 1
"""The answer is no: the workload does not fit, a descriptor is invalid."""
EXIT_UNANSWERED = 2
"""``fit``: no cluster asked can take the workload and at least one could not be asked, so
the answer is unknown (``kubectl diff`` exits above 1 when it cannot tell)."""


class CliError(Exception):
    """An error a person can act on; printed as ``error: <message>`` with its exit code.
    ``cluster``: the API server could not be reached or refused (not the input's fault)."""

    def __init__(self, message: str, *, exit_code: int = EXIT_ERROR,
                 cluster: bool = False) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.cluster = cluster


#: The top-level modules of the ``sim`` extra (pyproject): the trace policies and the plots
#: need them, a serving install (the image) leaves them out.
SIM_EXTRA_MODULES = frozenset({"numpy", "matplotlib"})


@contextmanager
def sim_extra(feature: str) -> Iterator[None]:
    """Imports made inside need the ``sim`` extra: if one of its modules is missing, a one-line
    error says how to install it. Any other missing module is a real bug and propagates."""
    try:
        yield
    except ModuleNotFoundError as err:
        missing = (err.name or "").partition(".")[0]
        if missing not in SIM_EXTRA_MODULES:
            raise
        raise CliError(f"{feature} needs {missing}, which a serving install leaves out; "
                       "install the simulator's extra: pip install 'muster[sim]'") from None
