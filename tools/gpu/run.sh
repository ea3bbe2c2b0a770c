#!/usr/bin/env bash
# `patchset offline run` from this checkout on a machine without network, with patchset installed first
# from the carry folder (`patchset offline prepare`, or tools/gpu/prepare.sh) when it is not yet:
#
#   tools/gpu/run.sh [--backend B] [--carry DIR] [--cuda-arch A] [--workers N] [--deadline S]
#                    [--verify-patches "N ..."] [--out DIR] STEP...
#
# Steps: main, verify, sweep:NAME:OPS, wheel (`patchset offline run --help` says what each does).
# Defaults here: --carry .cudabuild, --out $OUT (else .patchset/gpu-out), PATCHSET_CACHE
# .patchset/cache. The venv (.patchset/gpu-venv) is made from the carried wheels with no index, the
# checkout installed into it editable (what runs is exactly the code that was copied here), again
# only when the carry's manifest changed; those installs are the first steps of the run record.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

carry=.cudabuild
deadline=570
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[$i]}" in
        --carry) carry=${args[$((i + 1))]:-} ;;
        --deadline) deadline=${args[$((i + 1))]:-570} ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    esac
done
out=${OUT:-$root/.patchset/gpu-out}
mkdir -p "$out" "$root/.patchset"
log="$out/log.txt"
export PATCHSET_CACHE="${PATCHSET_CACHE:-$root/.patchset/cache}" NO_COLOR=1 PYTHONUNBUFFERED=1
venv="$root/.patchset/gpu-venv"
record="$root/.patchset/gpu-bootstrap.tsv"
: > "$record"

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "run.sh: python3 is older than 3.11" >&2; exit 2; }
[ -f "$carry/manifest.json" ] || { echo "run.sh: no carry folder $carry (run patchset offline prepare first)" >&2; exit 2; }

# boot NAME COMMAND...: an install step, its exit code, seconds and command recorded for the run record
boot() {
    local name=$1; shift
    local t0 rc=0 cmd="$*"
    t0=$(date +%s)
    echo "== $name: $cmd" | tee -a "$log"
    timeout "${deadline%.*}" "$@" >> "$log" 2>&1 || rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" $(( $(date +%s) - t0 )) "${cmd//$root\//}" >> "$record"
    echo "== $name: exit $rc in $(( $(date +%s) - t0 ))s" | tee -a "$log"
    return $rc
}

stamp="$venv/.carry-manifest"
if ! cmp -s "$stamp" "$carry/manifest.json" 2>/dev/null || ! [ -x "$venv/bin/python" ]; then
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >> "$log" 2>&1; then
        # no ensurepip in this Python: a venv without pip, then pip from its own wheel
        python3 -m venv --without-pip "$venv" && pipwhl=$(ls "$carry"/wheels/pip-*.whl | head -1) &&
            "$venv/bin/python" "$pipwhl/pip" install --quiet --no-index "$pipwhl" >> "$log" 2>&1
    fi
    boot install "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index \
        --find-links "$carry/wheels" -r "$carry/requirements.txt" || exit 1
    boot install-patchset "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index \
        --no-build-isolation --no-deps -e . || exit 1
    cp "$carry/manifest.json" "$stamp"
fi
exec "$venv/bin/python" -m builder.cli offline run --carry "$carry" --out "$out" --bootstrap-record "$record" "$@"
