#!/usr/bin/env bash
# The GPU check (issue 40) as one command for the device machine: its image has torch, pyarrow,
# safetensors and scipy but neither Prefect nor pydantic, and no network.
#
#   1. benchmarks/gpu_check.py: the bert-base preset, pipeline loop vs BertForMaskedLM + Trainer,
#      eager (1a, first), then torch.compile (1b, last: the slowest);
#   2. pretrain@mlm-42 at bert-base size under torchrun (1 process), killed after its first
#      checkpoint and started again: it must resume from that checkpoint;
#   3. finetune of that model on one task per family (classification, MRC, NER) through the stages.
#
# Stages 2-3 run the flows themselves with params.yaml rewritten for the GPU (it is put back at
# the end) and benchmarks/device/shim standing in for Prefect. Needs, beside the tracked tree:
# data/pretraining/mlm-42, data/recipes (the sweep's choice pretrain reads), models/tokenizer,
# data/downstream and the wheels in .gpu/whl
# (benchmarks/device/wheels.sh: pydantic, seqeval, nltk and this repo's transformers, for
# Python 3.12). On the device tool:
#
#   run(command="bash benchmarks/device/run.sh", carry=[".gpu", "data/pretraining/mlm-42", "data/recipes",
#       "models/tokenizer", "data/downstream"])
#
# A smoke test on CPU (in a scratch copy of the repo: it rewrites params.yaml, models/mlm-42, metrics/):
#   PRESET=tiny DEVICE=cpu STEPS=3 BATCH=8 bash benchmarks/device/run.sh
# FINETUNE_TASKS="" skips stage 3 (default: sentiment msra_mrc msra_ner).
# Everything goes to $OUT (log.txt, status.txt, gpu_check.json, metrics.tgz). On an H100 (2026-11-27)
# 1a-3 took 5.5 min and 1b, two compilations, did not finish in the 2.5 min a 480 s limit left it.
set -u
PRESET=${PRESET:-bert-base} DEVICE=${DEVICE:-cuda} STEPS=${STEPS:-300} BATCH=${BATCH:-256}
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -d .gpu/whl ] && ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD/benchmarks/device/shim:$PWD"
python3 -c "import torch, transformers, pydantic; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
step() { echo; echo "=== $(date +%T) $*"; }
status() { echo "=== $1: exit $2"; echo "$1 $2" >> "$OUT/status.txt"; }

step "1a gpu_check eager ($PRESET, $STEPS steps x $BATCH)"
python3 benchmarks/gpu_check.py --preset "$PRESET" --device "$DEVICE" --steps "$STEPS" --batch-size "$BATCH"
status gpu_check_eager $?
cp benchmarks/results/gpu_check.json "$OUT/" 2>/dev/null  # kept if a later step runs out of time

cp params.yaml /tmp/params.yaml.orig
trap 'cp /tmp/params.yaml.orig params.yaml' EXIT
python3 - "$PRESET" "$DEVICE" "$BATCH" <<'EOF'
import sys, yaml
preset, device, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = yaml.safe_load(open("params.yaml"))
p["model"]["preset"] = preset
# ~600 steps of `batch` sequences (~80 tokens each), a checkpoint every 200
p["pretrain"].update(token_budget=600 * batch * 80, batch_size=batch, learning_rate=1e-4, checkpoint_every=200,
                     log_every=50, device=device, snapshots=[0.5])
p["finetune"].update(seeds=[1], seed_workers=1, device=device)
p["finetune"]["training"].update(learning_rate=5e-5)  # BERT-base fine-tuning (Devlin et al. 2019, appendix A.3)
yaml.safe_dump(p, open("params.yaml", "w"), allow_unicode=True, sort_keys=False)
EOF

step "2a pretrain@mlm-42 under torchrun, killed after its first checkpoint"
rm -rf checkpoints/pretrain/mlm-42 models/mlm-42
python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m flows.pretrain mlm 42 &
pid=$!
while kill -0 $pid 2>/dev/null && [ ! -f checkpoints/pretrain/mlm-42/last.pt ]; do sleep 0.2; done
sleep 1; kill -TERM $pid 2>/dev/null; wait $pid
status pretrain_killed $?
step "2b pretrain@mlm-42 again: resumes"
python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m flows.pretrain mlm 42
status pretrain_resumed $?

for task in ${FINETUNE_TASKS-sentiment msra_mrc msra_ner}; do
  step "3 finetune@mlm-42-$task"
  python3 -m flows.finetune mlm-42 "$task"
  status "finetune_$task" $?
done

step "1b gpu_check torch.compile"
python3 benchmarks/gpu_check.py --preset "$PRESET" --device "$DEVICE" --steps "$STEPS" --batch-size "$BATCH" --compile
status gpu_check_compile $?

cp benchmarks/results/gpu_check.json "$OUT/" 2>/dev/null  # this GPU's configurations, the new ones replaced
tar czf "$OUT/metrics.tgz" metrics/pretrain/mlm-42.* metrics/finetune/mlm-42-* 2>/dev/null
step "done"; cat "$OUT/status.txt"
