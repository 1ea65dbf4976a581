#!/usr/bin/env bash
# What a CUDA machine confirms that CI (no GPU) cannot, in one go, from the repository root:
#   OUT=gpu-results bash benchmarks/gpu_checks.sh [STEP ...]     (default: all steps, 1-4)
# Uses the machine's own python3 with torch (CUDA) and the checkout on PYTHONPATH; each step
# logs to $OUT and a failing step does not stop the others.
#   1. the CUDA back-end's tests (tests/test_throughput_gpu.py) run for real;
#   2. GPU test-retest at the reference protocol + agreement with the released GPU columns
#      (benchmarks/measure_gpu.py), latency from CUDA graph replays and, beside it, eager;
#   3. the accuracy trainer on CUDA under torchrun + NCCL (AMP, channels_last), then a design
#      that runs out of GPU memory: recorded as failed, the stream goes on;
#   4. training-step throughput: image-folder loader vs the loader-free ceiling at 160 px
#      (benchmarks/train_throughput.py).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu_checks}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 WANDB_MODE=disabled
PY=${PYTHON:-python3}
N=${GPU_RETEST_N:-20}
BUDGET=${GPU_RETEST_BUDGET:-2}
WORK=$(mktemp -d)

STEPS=" ${*:-1 2 3 4} "
step() { echo "=== $1"; }
want() { [[ "$STEPS" == *" $1 "* ]]; }
step "environment"
nvidia-smi 2>&1 | tee "$OUT/nvidia_smi.txt"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"

if want 1; then
  step "1. CUDA back-end tests"
  $PY -m pytest -q -p no:cacheprovider tests/test_throughput_gpu.py tests/test_throughput_reference.py \
    tests/test_accuracy_failures.py 2>&1 | tee "$OUT/pytest_gpu.log" | tail -n 15
fi

if want 2; then
  for latency in graphs eager; do
    step "2. GPU test-retest ($N architectures, 2 passes, latency from $latency)"
    $PY benchmarks/measure_gpu.py --n "$N" --budget "$BUDGET" --out "$WORK/retest-$latency" \
      $([ $latency = eager ] && echo --eager-latency) 2>&1 | grep -v "arch/s" \
      | tee "$OUT/measure_gpu_$latency.log"
    cp "$WORK/retest-$latency/summary.json" "$OUT/measure_gpu_$latency.json" 2>/dev/null
  done
fi

if want 3; then
step "3a. accuracy trainer on CUDA (torchrun, NCCL)"
TRAIN=(--config anb/configs/accuracy/digits_tiny.ini --distributed.device cuda
       --distributed.backend nccl --model.num_models 2)
$PY -m torch.distributed.run --standalone --nproc_per_node 1 -m anb.collect_accuracy.train \
  "${TRAIN[@]}" --logging.folder "$WORK/acc" 2>&1 | tail -n 20 | tee "$OUT/train_cuda.log"
$PY - "$WORK/acc" <<'EOF' | tee -a "$OUT/train_cuda.log"
import json, sys
from pathlib import Path
for f in sorted(Path(sys.argv[1]).rglob("*.json")):
    if "failed" in f.parts or f.parent.name in ("locks", "claims"):
        continue
    r = json.loads(f.read_text())
    if "metrics" in r:
        hw = r.get("provenance", {}).get("hardware", {})
        print(f.name, {k: r["metrics"].get(k) for k in ("val_top1", "train_time")},
              {k: hw.get(k) for k in ("device", "gpu", "driver", "cuda", "cudnn")})
EOF

step "3b. a design that runs out of GPU memory is recorded as failed, the stream goes on"
$PY -m torch.distributed.run --standalone --nproc_per_node 1 -m anb.collect_accuracy.train \
  "${TRAIN[@]}" --logging.folder "$WORK/oom" --model.max_attempts 1 --trainval.batch_size 1024 \
  --dataloader.image_size 512 --trainval.min_res 512 --trainval.max_res 512 \
  --trainval.val_res 512 --trainval.res_step 32 2>&1 | tail -n 20 | tee "$OUT/train_oom.log"
find "$WORK/oom/failed" -name "*.json" -exec grep -ho '"error": "[^"]\{0,160\}' {} \; \
  | tee -a "$OUT/train_oom.log"
fi

if want 4; then
  step "4. training-step throughput: loader vs in-memory ceiling"
  $PY benchmarks/train_throughput.py --num-archs 3 --res 160 --batch-size 256 --loaders folder \
    --images 4096 --workers 12 --device cuda --out "$OUT/train_throughput.json" 2>&1 \
    | grep -v "JPEGs" | tee "$OUT/train_throughput.log"
fi
rm -rf "$WORK"
