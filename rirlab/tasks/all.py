"""Importing this module registers every task."""

from rirlab.tasks import listops  # noqa: F401
