#!/usr/bin/env bash
# Prepare the carry folder for a machine without network (the GPU machine): `patchset offline prepare`
# (builder/deliver/carry.py) into this checkout's usual folder. Run here, from anywhere in the checkout,
# after `patchset fetch` works:
#
#   tools/gpu/prepare.sh [--wheel] [DIR]        (default: .cudabuild, git-ignored)
#
# The folder: a git bundle of the verified pin, the wheels of what patchset needs that the machine's
# image lacks, and manifest.json; --wheel also carries what run.sh's `wheel` step needs (the pin's
# bindings sdist without its vendor/llama.cpp as wheel/bindings.tar.gz, its sha256 in
# wheel/bindings.sha256, and the wheels of the bindings' runtime dependencies).
#
# Measured: about 38 MB in all (the bundle is the pin's whole tree, ~34 MB: fetch checks its tree id
# against the pin, so a slice of it would not do).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
wheel=()
[ "${1:-}" = --wheel ] && { wheel=(--wheel); shift; }
dir=${1:-.cudabuild}
py=${PYTHON:-$root/.venv/bin/python}
exec "$py" -m builder.cli offline prepare "${wheel[@]}" "$dir"
