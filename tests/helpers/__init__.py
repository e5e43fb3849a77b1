"""Helpers shared by the test folders (not tests): paths and the real CLI, MLflow stores shaped like a sweep's,
model checks, the device checks, and the plugin modules that subprocesses load through $RIRLAB_PLUGINS."""
