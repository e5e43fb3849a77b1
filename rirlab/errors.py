"""User-facing errors: one line that says what is wrong and how to fix it (CLI exit code 2)."""


class UserError(Exception):
    """Bad input from the user (spec, parameter, data file). The CLI prints it on one line and exits 2."""

    exit_code = 2
