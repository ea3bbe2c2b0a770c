#!/usr/bin/env bash
# Run patchset on a machine without network (the GPU machine) from the carry folder that
# tools/gpu/prepare.sh made, through the real CLI, and write parsed results (JSON) to $OUT.
#
#   tools/gpu/run.sh [--backend cuda|cpu] [--carry DIR] [--cuda-arch A] [--workers N]
#                    [--deadline SECONDS] [--verify-patches "N ..."] STEP...
#
# Steps, run in order (each writes into $OUT; at most 8 files come back from a device call):
#   main              patchset build, test and verify on the patched tree -> test.json, verify.json
#   verify            patchset verify alone (--verify-patches), without build and test -> verify.json
#   sweep:NAME:OPS    patchset test --against upstream --ops OPS (all ops: OPS=all) -> sweep-NAME.json
#   wheel             patchset wheel from the carried bindings sdist (prepare.sh --wheel), installed
#                     into a new venv with --no-index and imported from an empty folder
#                     -> wheel-provenance.json, wheel-check.txt
# Every call also writes run-NAME.json (what ran: commands, exit codes, seconds, date, host, GPU,
# pin, patch hashes) and log.txt (patchset's output). State that later calls reuse (venv, cache,
# work repository, build folders) lives in the git-ignored .patchset/, which the device keeps
# between calls while the machine stays warm.
#
# Try the same command on the CPU here first (`--backend cpu`, from a copy of the checkout,
# without network: see docs/backends.md), so that the GPU run cannot fail for a trivial reason.
set -uo pipefail
invocation="$*"  # recorded in run-*.json: `patchset evidence update` names the command that made each file
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

backend=cuda
carry=.cudabuild
cuda_arch=90
workers=1
deadline=570
verify_patches=""
steps=()
while [ $# -gt 0 ]; do
    case "$1" in
        --backend) backend=$2; shift 2 ;;
        --carry) carry=$2; shift 2 ;;
        --cuda-arch) cuda_arch=$2; shift 2 ;;
        --workers) workers=$2; shift 2 ;;
        --deadline) deadline=$2; shift 2 ;;
        --verify-patches) verify_patches=$2; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) steps+=("$1"); shift ;;
    esac
done
[ ${#steps[@]} -gt 0 ] || { echo "run.sh: name at least one step (main, verify, sweep:NAME:OPS, wheel)" >&2; exit 2; }
out=${OUT:-$root/.patchset/gpu-out}
mkdir -p "$out"
log="$out/log.txt"
start=$(date +%s)
export PATCHSET_CACHE="$root/.patchset/cache" NO_COLOR=1 PYTHONUNBUFFERED=1
venv="$root/.patchset/gpu-venv"
ledger="$root/.patchset/gpu-ledger-$$.tsv"
mkdir -p "$root/.patchset"
: > "$ledger"
status=0
last_finished=0  # whether the last step ran to its end (not stopped at the deadline or skipped)

note() { echo "== $*" | tee -a "$log"; }

# step NAME COMMAND...: run with what is left of the deadline, record exit code and seconds
step() {
    local name=$1; shift
    local left=$(( deadline - ($(date +%s) - start) ))
    if [ "$left" -le 5 ]; then
        note "$name: skipped, deadline reached"; printf '%s\t%s\t%s\t%s\n' "$name" "skipped" 0 "$*" >> "$ledger"
        status=1; last_finished=0; return 1
    fi
    note "$name: $* (at most ${left}s)"
    local t0=$(date +%s) rc=0
    timeout "$left" "$@" >> "$log" 2>&1 || rc=$?
    # 124: stopped at the deadline (timeout's own code); 137: killed
    case "$rc" in 124|137) last_finished=0 ;; *) last_finished=1 ;; esac
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" $(( $(date +%s) - t0 )) "$*" >> "$ledger"
    note "$name: exit $rc in $(( $(date +%s) - t0 ))s"
    return $rc
}

finish() {
    "${py:-python3}" "$root/tools/gpu/runinfo.py" "$ledger" "$out/run-${label}.json" "$backend" "$carry" "$invocation" \
        >> "$log" 2>&1 || true
    exit $status
}
label=$(printf '%s' "${steps[0]}" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-40)
trap finish EXIT

# -- the machine: tools and Python ----------------------------------------------------------------
for tool in git cmake c++; do
    command -v "$tool" >/dev/null || { note "missing on this machine: $tool"; status=2; exit; }
done
if [ "$backend" = cuda ] && ! command -v nvcc >/dev/null; then
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
    command -v nvcc >/dev/null || { note "missing on this machine: nvcc"; status=2; exit; }
fi
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { note "python3 is older than 3.11"; status=2; exit; }
[ -f "$carry/manifest.json" ] || { note "no carry folder $carry (run tools/gpu/prepare.sh here first)"; status=2; exit; }

stamp="$venv/.carry-manifest"
if ! cmp -s "$stamp" "$carry/manifest.json" 2>/dev/null || ! [ -x "$venv/bin/patchset" ]; then
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >> "$log" 2>&1; then
        # no ensurepip in this Python: a venv without pip, then pip from its own wheel
        python3 -m venv --without-pip "$venv" && pipwhl=$(ls "$carry"/wheels/pip-*.whl | head -1) &&
            "$venv/bin/python" "$pipwhl/pip" install --quiet --no-index "$pipwhl" >> "$log" 2>&1
    fi
    step install "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index \
        --find-links "$carry/wheels" -r "$carry/requirements.txt" || exit
    # the checkout itself, not a wheel of it: what runs is exactly the code that was copied here
    step install-patchset "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index \
        --no-build-isolation --no-deps -e . || exit
    cp "$carry/manifest.json" "$stamp"
fi
py="$venv/bin/python"
ps="$venv/bin/patchset"

step fetch "$ps" fetch --bundle "$carry/llama.cpp.bundle" || exit
step apply "$ps" apply || exit

arch=()
# one architecture for build, verify and the sweep (default 90: the H200; `native` works too where
# CMake can see the GPU): the same flags, so verify reuses the patched tree's build instead of
# compiling ggml-cuda again
[ "$backend" = cuda ] && [ -n "$cuda_arch" ] && arch=(--cuda-arch "$cuda_arch")
# verify, then its evidence of this backend as verify.json (only from a verify that finished: exit 0, 4, 6 ...)
verify_step() {
    # shellcheck disable=SC2086  # a list of patch numbers, split on purpose
    step verify "$ps" verify --backend "$backend" "${arch[@]}" $verify_patches || status=1
    # a verify stopped at the deadline (or skipped) wrote the evidence of some patches, or none: the
    # files there are of earlier runs, never this step's result
    if [ "$last_finished" != 1 ]; then
        note "verify: did not finish: no verify.json"; status=1; return
    fi
    "$py" - "$root/.patchset/evidence" "$backend" "$out/verify.json" <<'PY' || status=1
import json, pathlib, sys
ev, backend, out = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
found = {p.parent.name: json.loads(p.read_text()) for p in sorted(ev.glob(f"*/{backend}.json"))}
out.write_text(json.dumps({"format": "patchset-verify-evidence/1", "backend": backend, "patches": found},
                          indent=1) + "\n")
PY
}

for s in "${steps[@]}"; do
    case "$s" in
        main)
            step build "$ps" build --backend "$backend" "${arch[@]}" || { status=1; continue; }
            step test "$ps" test --backend "$backend" --json "$out/test.json" || status=1
            verify_step
            ;;
        verify)
            verify_step
            ;;
        sweep:*)
            IFS=: read -r _ name ops <<< "$s"
            sel=(--all); [ "$ops" != all ] && sel=(--ops "$ops")
            w=(); [ "$workers" -gt 1 ] && w=(--workers "$workers")
            mode=(); [ "$backend" = cuda ] && mode=(--mode test)
            step "sweep-$name" "$ps" test --against upstream --backend "$backend" "${mode[@]}" "${sel[@]}" "${w[@]}" \
                "${arch[@]}" --json "$out/sweep-$name.json" || status=1
            ;;
        wheel)
            [ -f "$carry/wheel/bindings.tar.gz" ] || { note "no bindings sdist in $carry (prepare.sh --wheel)"; status=2; continue; }
            dist="$root/.patchset/dist-$backend"
            rm -rf "$dist"
            step wheel "$ps" wheel --backend "$backend" "${arch[@]}" --sdist "$carry/wheel/bindings.tar.gz" \
                --sdist-sha256 "$(cat "$carry/wheel/bindings.sha256")" --out "$dist" || { status=1; continue; }
            whl=$(ls "$dist"/*.whl | head -1)
            wv="$root/.patchset/wheel-venv"
            rm -rf "$wv"
            step wheel-venv python3 -m venv --without-pip "$wv" || { status=1; continue; }
            step wheel-install "$py" -m pip --python "$wv/bin/python" install --quiet --disable-pip-version-check \
                --no-index --find-links "$carry/wheels" "$whl" || { status=1; continue; }
            empty=$(mktemp -d)
            (cd "$empty" && step wheel-check "$wv/bin/python" "$root/tools/gpu/wheel_check.py") || status=1
            (cd "$empty" && "$wv/bin/python" -m llama_cpp.patchset --json > "$out/wheel-provenance.json" 2>> "$log") || status=1
            sed -n '/^== wheel-check: .*(at most/,/^== wheel-check: exit/p' "$log" > "$out/wheel-check.txt" || true
            ls -l "$dist" >> "$out/wheel-check.txt"
            ;;
        *) note "unknown step '$s'"; status=2 ;;
    esac
done
