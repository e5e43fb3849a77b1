"""Importing this module registers every task."""

from rirlab.tasks import flipflop, listops, logic  # noqa: F401
