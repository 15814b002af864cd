# Two entry points for a newcomer: `make repro` (set up, then run the whole pipeline)
# and `make test` (set up, then run the tests). Both create .venv on first use.
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)

.PHONY: setup repro pull compare study full test bench gpu-check pipeline clean-venv

setup: $(VENV)/.installed

# Python 3.11 (constraints.txt pins wheels resolved for it); torch first, pinned (on a stock
# PyPI index its Linux x86-64 wheel is the CUDA build, about 3 GB with its nvidia-* wheels: set
# TORCH_INDEX=https://download.pytorch.org/whl/cpu for the CPU build), then the project with every
# transitive version pinned by constraints.txt.
TORCH_INDEX ?=
$(VENV)/.installed: pyproject.toml constraints.txt
	@python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
		{ echo "make setup: needs Python 3.11 as python3 (found $$(python3 --version 2>&1))"; exit 1; }
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $@

# One local Prefect server for all stages (each would otherwise start its own), and `dvc repro` that
# prints the stage it is in (k of n; tasks/orchestration/progress.py); then the run's artifacts go to the
# default DVC remote (.dvc/config: a folder beside the checkout), so that another clone gets them with
# `make pull` instead of recomputing them.
repro: setup
	python -m tasks.orchestration.prefect_server python -m tasks.orchestration.progress
	dvc push --run-cache

# The committed run's artifacts from the DVC remote (data, models, predictions; no stage reruns).
pull: setup
	python -m tasks.orchestration.remote

# Two workers: the two end-to-end modules (tests/e2e), each its own repository, run side by side.
test: setup
	pytest -n 2 --dist loadfile --no-loadscope-reorder

# Every objective of params.yaml, pretrained, fine-tuned and compared with one pretraining seed; its report lands in
# reports/compare/ (docs/objectives.md). Run as units, as make study.
compare: setup
	python -m tasks.orchestration.prefect_server python -m tasks.orchestration.study compare

# 5 pretraining seeds of mlm, wwm, mac, electra and random init, each model at its own recipe, as units whose results
# are committed (reports/study/units/): it prints its plan, runs the units not done for this code and params, and
# when all are done writes the report, metrics and MDE plan into reports/study/ (docs/statistics.md). Commit
# reports/study/ after a stop; a fresh clone goes on from there. WORKERS=N: N units at once.
study: setup
	python -m tasks.orchestration.prefect_server python -m tasks.orchestration.study study --workers $(or $(WORKERS),1)

# The default run at the scale it had before it was fitted to a 2-core CPU in 30 minutes (a 4x token
# budget, the learning-rate sweeps, 3 fine-tuning seeds, larger training sets, compression on three
# tasks: `STUDIES["full"]` in tasks/orchestration/study.py; about 4 h on 2 cores); report in reports/full/.
full: setup
	python -m tasks.orchestration.prefect_server python -m tasks.orchestration.study full

bench: setup
	python benchmarks/pretraining_data.py
	python benchmarks/packing.py
	python benchmarks/pretrain_step.py
	python benchmarks/bf16.py
	python benchmarks/seeds_side_by_side.py
	python benchmarks/finetune_step.py
	python benchmarks/distill_step.py
	python benchmarks/fast_mlm.py
	python benchmarks/batching.py
	python benchmarks/attention_zones.py
	python benchmarks/scale.py
	python benchmarks/error_rates.py
	python benchmarks/plateau.py
	python benchmarks/stage_overhead.py
	python benchmarks/summary.py

# The bert-base preset for 300 steps on CUDA, next to Hugging Face's Trainer: tokens/s, MFU,
# peak memory (benchmarks/results/gpu_check.json); then the unpadded encoder's attention kernels
# against the padded one (benchmarks/results/unpadded.json). Without a GPU each says so and exits 0.
# Needs a CUDA build of torch in .venv; STEPS=500 for a longer run.
gpu-check: setup
	python benchmarks/gpu_check.py --steps $(or $(STEPS),300)
	python benchmarks/unpadded.py

# The same DAG as one Prefect flow (one task per stage, each a `dvc repro --single-item`), against
# the shared local Prefect server; `python -m flows.pipeline serve` schedules it (docs/running.md).
pipeline: setup
	python -m tasks.orchestration.prefect_server python -m flows.pipeline

clean-venv:
	rm -rf $(VENV)
