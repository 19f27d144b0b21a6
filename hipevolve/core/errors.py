"""The one exception that crosses into the CLI: a user mistake, told in one line with its fix."""


class UserError(Exception):
    """A problem the user can fix. The CLI prints `problem` and `fix` on one line, no traceback."""

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix

    def line(self) -> str:
        return f"{self.problem} ({self.fix})" if self.fix else self.problem
