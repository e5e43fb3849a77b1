"""The sweep spec file: its schema, line numbers for errors, and loading it for a run."""
