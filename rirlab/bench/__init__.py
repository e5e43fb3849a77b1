"""Speed and memory benchmarks (``rirlab bench``): one protocol = one module of this package (``base``: what they
share; ``run`` and ``BenchOptions`` live there).

- ``step``: median wall time of one step (train: forward + backward + AdamW; eval: forward
  under no_grad) after warm-up, and peak memory, for one model at batch x length.
- ``table1``: RIR paper Table 1 -- 100 ListOps samples per length bin, batch 1, training-mode
  forward + backward, the ListOps hyperparameters; minutes and peak memory per bin per model; OOM / TIMEOUT
  (under ``mem_cap_gb`` / ``time_cap_s``) reported in the cell.
- ``gut_halt``: Recurrent Transformers paper §7: GUT vs "GUT upper bound" vs "GUT no halt", ms per train step.
- ``learn``: time to learn -- trains one model on a task under a recipe (rirlab.train.Trainer, no Ray or
  MLflow) for a budget of training minutes and reports the training seconds, steps and samples at which dev
  accuracy first reaches each threshold, and the curve (dev accuracy vs seconds).

Peak memory: ``torch.cuda.max_memory_allocated`` on GPU; on CPU the increase of the process's
peak RSS over its baseline before the measured work (a lower bound when an earlier phase
peaked higher).
"""
