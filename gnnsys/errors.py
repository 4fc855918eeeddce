"""The error types of every layer (a leaf: imports nothing from the project).

`GnnsysError` is the base; the CLI prints any of them as one line and exits
with status 2. `DatasetError` names a file (bad input data, a failed check),
`ConfigError` an option (a bad value or a combination that cannot work), and
`GPUUnavailableError` a request that needs CUDA or Triton where neither runs.
"""


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
