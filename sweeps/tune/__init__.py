"""Ray Tune: search algorithms, the Tuner, the trainable (the only code that runs on Ray workers)."""
