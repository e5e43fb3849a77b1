"""One sweep from start to end: Ray, signals, the parent run, the Tuner fit, the progress line."""
