"""rirlab: sweeps and ablations for the Recursion-in-Recursion family of sequence models."""

__version__ = "0.1.0"
