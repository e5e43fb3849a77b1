"""Ray Tune + Optuna + MLflow wiring: spec schema, Tuner construction, MLflow nesting, resume."""
