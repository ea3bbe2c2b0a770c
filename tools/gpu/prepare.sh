#!/usr/bin/env bash
# Prepare the carry folder for a machine without network (the GPU machine): a git bundle of the
# verified pin, and wheels of what patchset needs that the machine's image lacks. Run here, from
# anywhere in the checkout, after `patchset fetch` works:
#
#   tools/gpu/prepare.sh [--wheel] [DIR]        (default: .cudabuild, git-ignored)
#
# --wheel also carries what `patchset wheel` needs there (run.sh's `wheel` step): the pin's
# bindings sdist repacked without its vendor/llama.cpp (the wheel replaces that folder with the
# patched tree anyway; the whole sdist, 76 MB, is over the device's 64 MiB carry) as
# wheel/bindings.tar.gz with its sha256 in wheel/bindings.sha256, and the wheels of the bindings'
# runtime dependencies, so that the built wheel can be installed and imported there.
#
# Measured: about 38 MB in all (the bundle is the pin's whole tree, ~34 MB: fetch checks its tree
# id against the pin, so a slice of it would not do). cmake is not carried (the GPU image has
# one; its wheel alone is ~27 MB); every other wheel is pure Python or py3-none-manylinux, so the
# folder fits CPython 3.11 and 3.12 on Linux x86_64 (glibc 2.28 or newer) alike.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
with_wheel=0
[ "${1:-}" = --wheel ] && { with_wheel=1; shift; }
dir=${1:-.cudabuild}
py=${PYTHON:-$root/.venv/bin/python}
tmp="$dir.tmp"
rm -rf "$tmp"
mkdir -p "$tmp/wheels"

"$py" -m builder.cli fetch --export-bundle "$tmp/llama.cpp.bundle"

# patchset's runtime dependencies as pyproject.toml names them, less cmake; setuptools installs the
# checkout itself without build isolation (which would need an index); pip bootstraps a venv that
# was made without one
"$py" - "$tmp/requirements.txt" <<'PY'
import re, sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
keep = [d for d in deps if re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() != "cmake"]
open(sys.argv[1], "w").write("\n".join(keep + ["setuptools>=77", "pip"]) + "\n")
PY
# the platform tags a glibc 2.28 x86_64 machine takes (pip asks for exactly those given): the pinned
# clang-format has manylinux_2_27/_2_28 wheels only (tests/test_gpu_prepare.py checks every dependency)
for ver in 3.11 3.12; do
    "$py" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64 \
        --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
        --python-version "$ver" --implementation cp -d "$tmp/wheels" -r "$tmp/requirements.txt"
done

if [ "$with_wheel" = 1 ]; then
    mkdir -p "$tmp/wheel"
    sdist=$(ls "${PATCHSET_CACHE:-$HOME/.cache/patchset}"/downloads/*/llama_cpp_python-*.tar.gz | head -1)
    "$py" - "$sdist" "$tmp/wheel/bindings.tar.gz" "$tmp/wheel/runtime.txt" <<'PY'
import gzip, hashlib, io, pathlib, re, sys, tarfile, tomllib
src, dst, reqs = sys.argv[1:4]
with tarfile.open(src) as tin:
    members = [m for m in tin.getmembers() if "/vendor/llama.cpp/" not in m.name + "/"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tout:
        for m in members:
            tout.addfile(m, tin.extractfile(m) if m.isfile() else None)
    top = members[0].name.split("/")[0]
    deps = tomllib.loads(tin.extractfile(f"{top}/pyproject.toml").read().decode())["project"]["dependencies"]
with open(dst, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
    gz.write(buf.getvalue())
pathlib.Path(dst).with_name("bindings.sha256").write_text(hashlib.sha256(pathlib.Path(dst).read_bytes()).hexdigest() + "\n")
pathlib.Path(reqs).write_text("\n".join(deps) + "\n")
PY
    "$py" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
        --python-version 3.12 --implementation cp -d "$tmp/wheels" -r "$tmp/wheel/runtime.txt"
fi

"$py" - "$tmp" <<'PY'
import hashlib, json, pathlib, sys, time
d = pathlib.Path(sys.argv[1])
files = sorted(p for p in d.rglob("*") if p.is_file())
manifest = {
    "format": "patchset-carry/1",
    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "files": {str(p.relative_to(d)): {"bytes": p.stat().st_size,
                                       "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in files},
}
(d / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
print(f"{d}: {len(files)} files, {sum(p.stat().st_size for p in files) / 2**20:.1f} MiB")
PY
rm -rf "$dir"
mv "$tmp" "$dir"
echo "carry folder ready: $dir (pass it in the device tool's carry list)"
