"""MLflow: the store, the client wrapper, what parent and child runs carry, the per-trial callback."""
