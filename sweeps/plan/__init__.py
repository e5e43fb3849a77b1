"""A loaded spec planned once: the trials, their resolved configs, the Tune space; the dry run."""
