#!/usr/bin/env bash
# The profiler on a real CUDA GPU (`make gpu-check`; one GPU, about 5 minutes): the three
# examples profiled with one worker at three per-worker batch sizes each (NCCL, CUDA-event
# timers) and the tensor memory each counted against the CUDA allocator's peak, what `srifty
# profile` says when asked for more workers than GPUs, `--device cpu`
# on a GPU machine, and a prediction and a recommendation made from a GPU profile.
# The profiles land in OUTDIR/profiles/<model>/b<batch>.json (the ones of 2026-12-04, on an
# H200, are shipped in profiles/h200; docs/gpu-check.md has that run's output).
#
#   scripts/gpu_check.sh OUTDIR           (PY=python3, TYPE=p5en.48xlarge: the label recorded)
set -u
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR}
PY=${PY:-python3}
TYPE=${TYPE:-p5en.48xlarge}
BATCHES=${BATCHES:-"cnn_resnet:32,128,512 transformer_lm:8,32,128 mlp_recsys:256,1024,4096 rnn_lm:16,64,256"}
SECONDS_EACH=${SECONDS_EACH:-6}
S="$PY -m srifty"
mkdir -p "$OUT/profiles"
step() { echo; echo "### $*"; }

step environment
$PY -c 'import torch; c = torch.cuda.is_available(); print("torch", torch.__version__, "cuda", c, torch.cuda.device_count(), torch.cuda.get_device_name(0) if c else "-", "nccl", ".".join(map(str, torch.cuda.nccl.version())) if c else "-")'
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null || true

for spec in $BATCHES; do
  model=${spec%%:*}
  mkdir -p "$OUT/profiles/$model"
  for b in $(echo "${spec#*:}" | tr , ' '); do
    step "profile $model at batch $b"
    t0=$SECONDS
    timeout 150 $S profile "examples/$model.py" --nproc 1 --batch-size "$b" --max-seconds "$SECONDS_EACH" \
      --instance-type "$TYPE" --startup-timeout 90 --out "$OUT/profiles/$model/b$b.json" --json \
      || echo "FAILED: $model at batch $b (rc $?)"
    echo "wall $((SECONDS - t0)) s"
  done
done

step "tensor memory the profiler counted against the CUDA caching allocator's peak (job.memory)"
$PY - "$OUT/profiles" <<'PYEOF'
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*/b*.json")):
    m = json.loads(f.read_text())["job"].get("memory") or {}
    mib = lambda k: f"{m[k] / 2**20:,.0f}" if m.get(k) is not None else "-"
    ratio = m["cuda_max_allocated_bytes"] / m["peak_bytes"] if m.get("peak_bytes") and m.get("cuda_max_allocated_bytes") else None
    print(f"{f.parent.name:>15} {f.stem:>6}  counted peak {mib('peak_bytes'):>8} MiB  held {mib('held_bytes'):>8} MiB  "
          f"CUDA allocated {mib('cuda_max_allocated_bytes'):>8} MiB  reserved {mib('cuda_max_reserved_bytes'):>8} MiB"
          + (f"  allocated/counted {ratio:.2f}" if ratio else ""))
PYEOF

step "more workers than GPUs (must be refused with a clear message, rc != 0)"
gpus=$($PY -c 'import torch; print(torch.cuda.device_count())')
timeout 120 $S profile examples/cnn_resnet.py --nproc $((gpus + 1)) --max-seconds 3 --out "$OUT/refused.json"; echo "rc $?"
timeout 120 $S profile --collectives --world-sizes $((gpus + 1)) --out "$OUT/refused-coll.json"; echo "rc $?"

step "--device cpu on a GPU machine (must record device cpu, backend gloo)"
timeout 150 $S profile examples/cnn_resnet.py --nproc 2 --device cpu --max-seconds 4 --min-iterations 8 \
  --out "$OUT/profiles/cpu-cnn_resnet.json" --json || echo "FAILED: --device cpu (rc $?)"

first=$(ls "$OUT"/profiles/cnn_resnet/*.json 2>/dev/null | head -1)
if [ -n "$first" ]; then
  step "show, predict and recommend from a GPU profile ($first)"
  $S show "$first"
  for config in "1x$TYPE:1" "2x$TYPE" 2xp4d.24xlarge; do
    $S predict --profile "$first" --config "$config" --json 2>&1 || true
    $S predict --profile "$OUT/profiles/cnn_resnet" --config "$config" 2>&1 || true
  done
  $S recommend --profile "$first" --budget 100 --top 5 2>&1 || true
fi
