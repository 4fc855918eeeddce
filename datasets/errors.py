"""The one error type that every reader and writer raises for bad input."""


class DatasetError(Exception):
    """Bad input or a failed check: a one-line message naming the file, the row
    where known, and the problem. The CLI prints it and exits with status 2."""

    def __init__(self, file, problem, row=None):
        self.file = str(file)
        self.row = row
        self.problem = problem
        where = f"{self.file}: row {row}" if row is not None else self.file
        super().__init__(f"{where}: {problem}")
