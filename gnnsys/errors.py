"""The error types of every layer (a leaf: imports nothing from the project).

`GnnsysError` is the base; the CLI prints any of them as one line and exits
with status 2. `DatasetError` names a file (bad input data, a failed check),
`ConfigError` an option (a bad value or a combination that cannot work), and
`GPUUnavailableError` a request that needs CUDA or Triton where neither runs,
and `PathError` (a DatasetError) an operating-system error on a user's path.
"""

import contextlib
import difflib
import errno


class GnnsysError(Exception):
    """Base of gnnsys's one-line errors."""


class DatasetError(GnnsysError):
    """Bad input or a failed check: a one-line message naming the file, the row
    where known, and the problem."""

    def __init__(self, file, problem, row=None):
        self.file = str(file)
        self.row = row
        self.problem = problem
        where = f"{self.file}: row {row}" if row is not None else self.file
        super().__init__(f"{where}: {problem}")


class ConfigError(GnnsysError, ValueError):
    """A bad option value or combination: names the option and the problem."""

    def __init__(self, option, problem):
        self.option = str(option)
        self.problem = problem
        super().__init__(f"{self.option}: {problem}")


class GPUUnavailableError(GnnsysError, RuntimeError):
    """`what` needs a CUDA GPU (or Triton) that this machine cannot provide."""

    def __init__(self, what, problem):
        self.what = str(what)
        self.problem = problem
        super().__init__(f"{self.what}: {problem}")


class PathError(DatasetError):
    """An operating-system error on a user's path (an output, a dataset
    file): names the path, what could not be done, and the reason with its
    errno name ("out.json: cannot write: No space left on device (ENOSPC)")."""

    def __init__(self, path, error: OSError, doing: str | None = None):
        self.errno = error.errno
        super().__init__(path, f"cannot {doing}: {os_reason(error)}" if doing else os_reason(error))


def os_reason(error: OSError) -> str:
    """Why an OSError happened, in one line: its text and errno name ("Permission denied (EACCES)")."""
    name = errno.errorcode.get(error.errno) if error.errno is not None else None
    text = error.strerror or str(error) or type(error).__name__
    return f"{text} ({name})" if name else text


@contextlib.contextmanager
def naming(path, doing: str):
    """Turn an OSError raised inside the block into a PathError naming `path` and `doing`."""
    try:
        yield
    except GnnsysError:
        raise
    except OSError as e:
        raise PathError(path, e, doing) from e


def did_you_mean(value: str, choices) -> str:
    """ " (did you mean 'X'?)" naming the choice nearest to a mistyped `value`, or "" when none is near."""
    near = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""
