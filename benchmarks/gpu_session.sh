#!/bin/bash
# The GPU issue's measurements, as run on a lent device (each section under its own time limit, so one slow
# section cannot eat the others; every figure is written under $OUT as it is measured).
#
#   bash benchmarks/gpu_session.sh SECTION...      sections: env tests table1 steps profile learn goal om_bf16 launches launches_compiled
#
# On a machine without ray/mlflow/optuna: rirlab needs none of them for these sections; it runs from the
# checkout (PYTHONPATH=$PWD, `python3 -m rirlab.cli`). RIRLAB_CACHE may point at a generated data cache
# (`rirlab data generate listops`) so that the learn section does not spend minutes generating ListOps.
# Limits (seconds) and the learn run's budget are variables: TESTS_S TABLE1_S TABLE1_CAP_S STEPS_S LEARN_MIN
# GOAL_S GOAL_CAP_S OM_S LAUNCH_S. DEVICE (default cuda) applies to goal and om_bf16: `DEVICE=cpu GOAL_CAP_S=1` checks them here.
set -u
OUT=${OUT:-bench_out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
RIR="python3 -m rirlab.cli"
GIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

for section in "$@"; do
  echo "=== $section ($(date -u +%H:%M:%S), commit $GIT)"
  case $section in
    env)
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
      python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" ;;
    tests)  # item 1: every cuda-marked test (-n: one process per core group; they share the one GPU)
      timeout "${TESTS_S:-150}" python3 -m pytest -m cuda tests/models/test_models_devices.py -q -p no:cacheprovider \
        -n 6 -rfE 2>&1 | tee "$OUT/tests.log" | tail -40 ;;
    table1)  # item 2: every registered Table 1 row, batch 1, 100 samples per bin; a cell over the cap is TIMEOUT
      timeout "${TABLE1_S:-250}" $RIR bench --protocol table1 --device cuda --time-cap-s "${TABLE1_CAP_S:-8}" \
        --json "$OUT/table1.json" 2>&1 | tee "$OUT/table1.log" ;;
    steps)  # item 3: training step times, fp32 and bf16, 128x100 then 128x1000
      timeout "${STEPS_S:-170}" python3 benchmarks/gpu_steps.py --device cuda --out "$OUT/steps.jsonl" ;;
    profile)  # item 3: kernels, launches, syncs and GPU busy share of a bare model step and of the trainer's step
      timeout 45 python3 benchmarks/gpu_profile.py --model rir_ebt_grc --batch 128 --length 100 --out "$OUT/prof_step.json"
      timeout 45 python3 benchmarks/gpu_profile.py --model rir_ebt_grc --batch 1 --length 1800 --out "$OUT/prof_rir1.json"
      timeout 45 python3 benchmarks/gpu_profile.py --model s4d --batch 1 --length 225 --out "$OUT/prof_s4d1.json"
      timeout 60 python3 benchmarks/gpu_profile.py --trainer --out "$OUT/prof_trainer.json" ;;
    learn)  # item 4: RIR-EBT-GRC on ListOps at the paper's recipe; a chain through $LEARN_CKPT
      timeout "${LEARN_S:-3000}" $RIR bench --protocol learn --device cuda --minutes "${LEARN_MIN:-8}" --eval-every 100 --dev-examples 1000 \
        --checkpoint "${LEARN_CKPT:-$OUT/learn.pt}" --json "$OUT/learn.json" --png "$OUT/learn.png" 2>&1 | tee "$OUT/learn.log" ;;
    goal)  # item 2's goal cell: RIR-EBT-GRC alone over the four bins, a cap high enough to reach 1500-2000 (the
           # first session's 8 s cap stopped it at 500-600, so the goal cell was never measured)
      timeout "${GOAL_S:-240}" $RIR bench --protocol table1 --device "${DEVICE:-cuda}" --models rir_ebt_grc \
        --time-cap-s "${GOAL_CAP_S:-60}" --json "$OUT/table1_rir_ebt_grc.json" 2>&1 | tee "$OUT/table1_rir_ebt_grc.log" ;;
    om_bf16)  # item 3's last missing cell: OM at 128 x 1000 in bf16 (one fp32 step took 13.7 s on the H100)
      timeout "${OM_S:-150}" python3 benchmarks/gpu_steps.py --device "${DEVICE:-cuda}" --models om --shapes 128x1000 \
        --precisions bf16 --repeats 2 --warmup 1 --out "$OUT/om_bf16.jsonl" ;;
    launches)  # issue 57: ATen ops, kernel launches, host syncs and GPU busy share per RIR-EBT-GRC training step
               # (`rirlab bench` step JSON) at the two shapes of the issue, then Table 1's RIR-EBT-GRC bins with it
      for shape in 128x100 1x1800; do
        timeout "${LAUNCH_S:-90}" $RIR bench --device "${DEVICE:-cuda}" --model rir_ebt_grc --batch "${shape%x*}" \
          --length "${shape#*x}" --repeats 5 --warmup 2 --json "$OUT/launches_$shape.json" 2>&1 | tee -a "$OUT/launches.log"
      done
      timeout "${GOAL_S:-240}" $RIR bench --protocol table1 --device "${DEVICE:-cuda}" --models rir_ebt_grc \
        --time-cap-s "${GOAL_CAP_S:-60}" --json "$OUT/launches_table1.json" 2>&1 | tee -a "$OUT/launches.log" ;;
    launches_compiled)  # issue 57 items 2-3: the same step with `compile: true` (the merge steps through inductor, Triton
                        # kernels on CUDA; the first step compiles ~4 graphs), against the eager figures of `launches`;
                        # EBT-GRC's per-token merge steps run the same graphs
      for model in rir_ebt_grc ebt_grc; do
        for shape in 128x100 1x1800; do
          timeout "${COMPILE_S:-600}" $RIR bench --device "${DEVICE:-cuda}" --model $model --batch "${shape%x*}" \
            --length "${shape#*x}" --repeats 5 --warmup 2 --set compile=true \
            --json "$OUT/launches_compiled_${model}_$shape.json" 2>&1 | tee -a "$OUT/launches_compiled.log"
        done
      done ;;
    *) echo "unknown section $section (env tests table1 steps profile learn goal om_bf16 launches launches_compiled)"; exit 2 ;;
  esac
done
