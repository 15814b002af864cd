# Two entry points for a newcomer: `make repro` (set up, then run the whole pipeline)
# and `make test` (set up, then run the tests). Both create .venv on first use.
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)

.PHONY: setup repro compare test bench gpu-check pipeline clean-venv

setup: $(VENV)/.installed

# torch first, from the pinned CPU wheel (an unpinned torch pulls GBs of CUDA packages),
# then the project with every transitive version pinned by constraints.txt.
$(VENV)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $@

# One local Prefect server for all stages (each would otherwise start its own).
repro: setup
	python -m tasks.orchestration.prefect_server dvc repro

# Two workers: the two end-to-end modules (tests/e2e), each its own repository, run side by side.
test: setup
	pytest -n 2 --dist loadfile --no-loadscope-reorder

# Every objective of params.yaml, pretrained, fine-tuned and compared (one dvc experiment).
compare: setup
	python -m tasks.orchestration.prefect_server dvc exp run -S \
		"compare=[$$(python -c 'from tasks.core.params import load_params; print(",".join(load_params().objectives))')]"

bench: setup
	python benchmarks/pretraining_data.py
	python benchmarks/packing.py
	python benchmarks/pretrain_step.py
	python benchmarks/finetune_step.py
	python benchmarks/distill_step.py
	python benchmarks/fast_mlm.py
	python benchmarks/batching.py
	python benchmarks/attention_zones.py
	python benchmarks/scale.py

# The bert-base preset for 300 steps on CUDA, next to Hugging Face's Trainer: tokens/s, MFU,
# peak memory (benchmarks/results/gpu_check.json). Without a GPU it says so and exits 0.
# Needs a CUDA build of torch in .venv; STEPS=500 for a longer run.
gpu-check: setup
	python benchmarks/gpu_check.py --steps $(or $(STEPS),300)

pipeline: setup
	python -m flows.pipeline

clean-venv:
	rm -rf $(VENV)
