"""User-facing errors: one line that says what is wrong and how to fix it (CLI exit code 2)."""

import shlex


class UserError(Exception):
    """Bad input from the user (spec, parameter, data file). The CLI prints it on one line and exits 2."""

    exit_code = 2

    def __init__(self, message: str = "", key: str | None = None):
        super().__init__(message)
        self.key = key  # the config or spec key at fault, where one is (the spec loader names its file:line)


def command(*words) -> str:
    """A command to paste, as printed in a hint: every word shell-quoted (a space, a quote or ``$(...)`` in a path
    or a value stays part of that word, never run)."""
    return " ".join(shlex.quote(str(w)) for w in words)
