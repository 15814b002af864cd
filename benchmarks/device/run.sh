#!/usr/bin/env bash
# The GPU check (issue 40) as commands for the device machine: its image has torch, pyarrow,
# safetensors and scipy but neither Prefect nor pydantic, and no network. Three calls, since the
# wheelhouse and the data do not fit the 64 MiB of one:
#
#   run(command="bash benchmarks/device/run.sh install .gpu/whl/prefect", carry=[".gpu/whl/prefect"])
#   run(command="bash benchmarks/device/run.sh install .gpu/whl/hf", carry=[".gpu/whl/hf"])
#       install the real stack (benchmarks/device/wheels.sh: Prefect, pydantic, seqeval, nltk, this
#       repo's transformers) into .gpu/site, which the warm machine keeps for the next call;
#   run(command="BENCH_COMMIT=<git rev-parse --short=12 HEAD, here> bash benchmarks/device/run.sh",
#       carry=["data/pretraining/mlm-42", "data/recipes", "models/tokenizer", "data/downstream"])
#       (that machine's copy has no git: BENCH_COMMIT is the commit its results record)
#       1. benchmarks/gpu_check.py: the bert-base preset, pipeline loop vs BertForMaskedLM + Trainer,
#          eager (1a, first), then torch.compile (1b, last: the slowest);
#       2. pretrain@mlm-42 at bert-base size under torchrun (1 process), killed after its first
#          checkpoint and started again: it must resume from that checkpoint;
#       3. finetune of that model on one task per family (classification, MRC, NER).
#
# Stages 2-3 run the flows under one local Prefect server (tasks.orchestration.prefect_server, as
# `make repro` does), in a scratch copy of the tree whose params.yaml is set for the GPU: the
# tracked params.yaml is never written.
#
# A rehearsal on CPU, in a venv like the image (docs/running.md):
#   for d in .gpu/whl/*; do bash benchmarks/device/run.sh install $d; done && PRESET=tiny DEVICE=cpu STEPS=3 BATCH=8 bash benchmarks/device/run.sh
# FINETUNE_TASKS="" skips stage 3 (default: sentiment msra_mrc msra_ner).
# Everything goes to $OUT (log.txt, status.txt, gpu_check.json, metrics.tgz). On an H100 (2026-11-27)
# 1a-3 took 5.5 min and 1b, two compilations, did not finish in the 2.5 min a 480 s limit left it.
set -u
PRESET=${PRESET:-bert-base} DEVICE=${DEVICE:-cuda} STEPS=${STEPS:-300} BATCH=${BATCH:-256}
OUT=${OUT:-/tmp/gpu_check_out}
SCRIPT=$(realpath "$0") SITE=$(realpath -m .gpu/site)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PREFECT_HOME=/tmp/prefect_home
step() { echo; echo "=== $(date +%T) $*"; }
status() { echo "=== $1: exit $2"; echo "$1 $2" >> "$OUT/status.txt"; }

case "${1:-}" in
install)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${2:?a folder of wheels}"/*.whl \
    || exit 1
  echo "installed the $(ls "$2"/*.whl | wc -l) wheels of $2 into $SITE"; exit 0;;
stages)  # in the scratch tree, under the Prefect server of the main run
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
  exit 0;;
esac

mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
[ -d "$SITE/prefect" ] && [ -d "$SITE/seqeval" ] || { echo "no stack in $SITE: run 'bash benchmarks/device/run.sh install <folder>' for each folder of .gpu/whl first"; exit 2; }
export PYTHONPATH="$SITE:$PWD"
python3 -c "import torch, transformers, prefect; print('torch', torch.__version__, 'transformers', transformers.__version__, 'prefect', prefect.__version__, 'cuda', torch.cuda.is_available())"
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

step "1a gpu_check eager ($PRESET, $STEPS steps x $BATCH)"
python3 benchmarks/gpu_check.py --preset "$PRESET" --device "$DEVICE" --steps "$STEPS" --batch-size "$BATCH"
status gpu_check_eager $?
cp benchmarks/results/gpu_check.json "$OUT/" 2>/dev/null  # kept if a later step runs out of time

WORK=$(mktemp -d /tmp/zhplm_gpu.XXXX)  # the tree without the wheels, the stack and git
tar --exclude=./.gpu --exclude=./.git -cf - . | tar -xf - -C "$WORK"
python3 - "$PRESET" "$DEVICE" "$BATCH" "$WORK/params.yaml" <<'EOF'
import sys, yaml
preset, device, batch, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
p = yaml.safe_load(open(path))
p["model"]["preset"] = preset
# ~600 steps of `batch` sequences (~80 tokens each), a checkpoint every 200
p["pretrain"].update(token_budget=600 * batch * 80, batch_size=batch, learning_rate=1e-4, checkpoint_every=200,
                     log_every=50, device=device, snapshots=[0.5])
p["finetune"].update(seeds=[1], seed_workers=1, device=device)
p["finetune"]["training"].update(learning_rate=5e-5)  # BERT-base fine-tuning (Devlin et al. 2019, appendix A.3)
yaml.safe_dump(p, open(path, "w"), allow_unicode=True, sort_keys=False)
EOF
(cd "$WORK" && PYTHONPATH="$SITE:$WORK" python3 -m tasks.orchestration.prefect_server bash "$SCRIPT" stages)

step "1b gpu_check torch.compile"
python3 benchmarks/gpu_check.py --preset "$PRESET" --device "$DEVICE" --steps "$STEPS" --batch-size "$BATCH" --compile
status gpu_check_compile $?

cp benchmarks/results/gpu_check.json "$OUT/" 2>/dev/null  # this GPU's configurations, the new ones replaced
(cd "$WORK" && tar czf "$OUT/metrics.tgz" metrics/pretrain/mlm-42.* metrics/finetune/mlm-42-* 2>/dev/null)
step "done"; cat "$OUT/status.txt"
