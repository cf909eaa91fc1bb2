"""The small exception hierarchy the adapters turn into one line and an exit code.

Every error perfgate raises on purpose derives from :class:`PerfgateError` and carries
the exit code the command line returns for it. Anything else escaping to the CLI is a
bug and is reported as such.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2
EXIT_INCONCLUSIVE = 3


class PerfgateError(Exception):
    """An error with a one-line message meant for the user."""

    exit_code: int = EXIT_ERROR

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        # A longer explanation (for example a worker's traceback) shown with --verbose.
        self.detail = detail

    def __str__(self) -> str:
        return self.message


class UsageError(PerfgateError):
    """Bad command-line input: an unknown workload, a bad --set, a missing option."""


class WorkloadError(PerfgateError):
    """A workload could not be built or run, or produced a non-finite loss."""


class DataError(PerfgateError):
    """A dataset path that does not look like the dataset, or data that cannot be read."""


class DeviceError(PerfgateError):
    """The requested device is not available."""


class CudaUnavailable(DeviceError):
    """``--device cuda`` where torch cannot use CUDA; the command line adds why (no
    driver, a driver too old for the installed torch, a CPU-only torch)."""


class FileFormatError(PerfgateError):
    """A result or baseline file that is empty, truncated, of another shape or version."""
