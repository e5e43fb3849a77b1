"""The sweep side: a YAML spec in, Ray Tune trials out, every trial an MLflow child run of one parent run.

  spec/    the spec file: its schema (``schema``), its YAML line numbers (``lines``), the trials it denotes
           (``trials``), loading it with --quick and --set and validating every trial config (``load``)
  plan/    ``SweepPlan``, built once from a loaded spec (trials, resolved configs, Tune param space, counts,
           hash); the dry run and its compute estimate (``dryrun``)
  tune/    Ray Tune: the search algorithm (``search``, ``optuna``), the Tuner (``tuner``), the trainable
  record/  MLflow: the store (``store``), the client wrapper (``tracker``), what runs carry (``artifacts``), the
           callback that makes one child run per trial (``callback``)
  driver/  one sweep from start to end (``sweep``): Ray and the cluster (``cluster``), Ctrl-C / SIGTERM
           (``signals``), the progress line (``progress``)
  compat/  every private attribute, patch and version-dependent call on Ray (``ray``), MLflow (``mlflow``) and
           Optuna, with the versions each was checked on (``check()``)

Layers (tests/train/test_imports.py checks them): spec < plan < tune, record < driver; compat below them all
(tests/train/test_compat.py). The names every writer and reader of MLflow uses are in ``rirlab.contract``.
Nothing here imports ``analysis``; the CLI passes the parent run's report in.
"""
