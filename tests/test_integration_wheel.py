"""The real release wheel: llama-cpp-python 0.3.36 on the patched b11312, built once for the CPU
(without the multimodal library and llama-common, at -O0 and with clang where the machine has it, to keep it short:
what is tested is how the wheel is made, named, recorded and installed, not its speed), installed
into a fresh virtual environment and used from a folder with no build output. Slow (a cold llama.cpp
build): marked integration.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import hermetic_env

from builder.compile.cmakebuild import BuildResult
from builder.deliver import drift
from builder.deliver.wheel import WheelOptions, prepare
from builder.deliver.wheel_build import WheelResult, build_wheel
from builder.project import Project, load_project
from builder.prove.verify import verify
from builder.series.load import load_series
from builder.upstream.pin import load_pin
from builder.words import PROVEN

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parent.parent
# -O0 through the user's own -D options (the provenance records them like any others), and clang when there
# is one (CI installs it for the Metal check): at -O0 it compiles llama's sources in 0.55 to 0.6 of GCC's time
CLANG = (("-DCMAKE_C_COMPILER=clang", "-DCMAKE_CXX_COMPILER=clang++")
         if shutil.which("clang") and shutil.which("clang++") else ())
QUICK = ("-DCMAKE_C_FLAGS_RELEASE=-O0", "-DCMAKE_CXX_FLAGS_RELEASE=-O0", *CLANG)
OPTIONS = WheelOptions(no_mtmd=True, no_common=True, cmake_args=QUICK)
# the wheel's pure-Python dependencies (its METADATA Requires-Dist), and pytest for B1's test, from PyPI
DEPENDENCIES = ["numpy", "typing-extensions", "diskcache", "jinja2", "pytest"]


def _copy_project(root: Path, cache: Path, series_names: list[str] | None = None,
                  state_dir: Path | None = None) -> Project:
    shutil.copytree(REPO_ROOT / "upstream", root / "upstream")
    shutil.copytree(REPO_ROOT / "patches", root / "patches")
    shutil.copytree(REPO_ROOT / "patches-bindings", root / "patches-bindings")
    if series_names is not None:
        (root / "patches" / "series").write_text("".join(f"{n}\n" for n in series_names))
        for left_out in (root / "patches").glob("*.patch"):
            if left_out.name not in series_names:
                left_out.unlink()
    return load_project(root=root, pin_file=root / "upstream" / "llama.cpp.toml",
                        state_dir=state_dir or root / ".patchset", cache_dir=cache)


@pytest.fixture(scope="module")
def isolated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The module's slow fixtures run before each test's own hermetic fixture: isolate them too
    (HOME, XDG folders, so ccache and pip caches, git config)."""
    with pytest.MonkeyPatch.context() as mp:
        hermetic_env(mp, tmp_path_factory.mktemp("wheel-env"))
        yield


@pytest.fixture(scope="module")
def project(isolated: None, real_pin_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A copy of the project. PATCHSET_TEST_WHEEL_STATE names a state folder to use instead of a
    new one (its work repository and wheel build folder are reused and kept): a warm rerun."""
    keep = os.environ.get("PATCHSET_TEST_WHEEL_STATE")
    return _copy_project(tmp_path_factory.mktemp("wheel-project"), real_pin_cache,
                         state_dir=Path(keep) if keep else None)


@pytest.fixture(scope="module")
def built(project: Project) -> WheelResult:
    start = time.monotonic()
    result = build_wheel(project, replace(OPTIONS, out_dir=project.root / "dist1"))
    print(f"\ncold wheel build: {time.monotonic() - start:.0f} s, {result.compiled} compiles")
    return result


@pytest.fixture(scope="module")
def venv(built: WheelResult, project: Project, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel (--no-index) and the tree's own gguf-py."""
    env_dir = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *DEPENDENCIES], check=True)
    subprocess.run([*pip, "--no-index", str(built.wheel)], check=True)
    # gguf-py of the pinned tree, as vendored in the wheel's source (a copy: pip may build in place)
    gguf_py = env_dir.parent / "gguf-py"
    shutil.copytree(built.prepared.source_dir / "vendor" / "llama.cpp" / "gguf-py", gguf_py)
    subprocess.run([*pip, str(gguf_py)], check=True)
    return py


def _run(py: Path, code: str, cwd: Path, *args: str) -> dict:
    """Run `code` in the venv from `cwd` (a folder with no build output); its last line, as JSON."""
    script = cwd / "check.py"
    script.write_text(textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    r = subprocess.run([str(py), str(script), *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_wheel_is_named_and_tagged_like_upstreams(built: WheelResult) -> None:
    name = built.wheel.name
    assert name.startswith(f"llama_cpp_python-{built.prepared.version}-py3-none-")
    assert built.prepared.version.startswith("0.3.36+11312.")
    with zipfile.ZipFile(built.wheel) as zf:
        names = zf.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(meta).decode()
    assert f"Version: {built.prepared.version}" in metadata
    assert "## This build: llama.cpp with a patch series" in metadata
    assert "llama_cpp/patchset.json" in names and "llama_cpp/patchset.py" in names
    assert json.loads(built.provenance_file.read_text()) == built.prepared.provenance
    # --no-common: llama.cpp's CMake left llama-common out (the bindings force it on), and the record says so
    assert "llama_cpp/lib/libllama.so" in names and not [n for n in names if "llama-common" in n], names
    assert built.prepared.provenance["left_out"] == ["mtmd", "llama-common"]
    assert "left out: mtmd, llama-common" in metadata


def test_installed_wheel_provenance_is_the_pin_and_the_series(venv: Path, project: Project, tmp_path: Path) -> None:
    got = _run(venv, """\
        import json, llama_cpp, llama_cpp.patchset
        print(json.dumps({"file": llama_cpp.__file__, "version": llama_cpp.__version__,
                          "provenance": llama_cpp.patchset.provenance()}))
        """, tmp_path)
    assert Path(got["file"]).is_relative_to(venv.parent.parent), "imported from outside the venv"
    prov = got["provenance"]
    pin = load_pin(project.pin_file)
    series = load_series(project.patches_dir)
    assert got["version"] == prov["version"]
    assert (prov["upstream"]["commit"], prov["upstream"]["tree"], prov["upstream"]["tag"]) == (
        pin.commit, pin.tree, pin.tag)
    assert [p["file"] for p in prov["series"]["patches"]] == [p.name for p in series.patches]
    assert [p["sha256"] for p in prov["series"]["patches"]] == [
        hashlib.sha256(p.path.read_bytes()).hexdigest() for p in series.patches]
    assert [p["subject"] for p in prov["series"]["patches"]] == [p.subject for p in series.patches]
    assert prov["series"]["count"] == len(series.patches)
    assert prov["bindings"]["sdist_sha256"] == next(s.sha256 for s in pin.sources if hasattr(s, "subdir"))
    # the bindings series is in it too, and with B1 the drift check finds nothing
    bindings = load_series(project.series("bindings").patches_dir)
    assert [p["file"] for p in prov["bindings_series"]["patches"]] == [p.name for p in bindings.patches]
    assert prov["bindings_series"]["upstream"]["commit"] == load_pin(project.series("bindings").pin_file).commit
    assert prov["binding_drift"] == []
    text = subprocess.run([str(venv), "-m", "llama_cpp.patchset"], cwd=tmp_path, capture_output=True, text=True,
                          check=True).stdout
    assert pin.commit in text and all(p.name in text for p in [*series.patches, *bindings.patches])


ACC_CODE = """\
import ctypes, json, os, struct, sys
import llama_cpp

lib = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
base = ctypes.CDLL(os.path.join(lib, "libggml-base.so"))
cpu = ctypes.CDLL(os.path.join(lib, "libggml-cpu.so"))
P, I64, SZ = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t

class InitParams(ctypes.Structure):
    _fields_ = [("mem_size", SZ), ("mem_buffer", P), ("no_alloc", ctypes.c_bool)]

def fn(lib, name, args, res):
    f = getattr(lib, name)
    f.argtypes, f.restype = args, res
    return f

ggml_init = fn(base, "ggml_init", [InitParams], P)
new_2d = fn(base, "ggml_new_tensor_2d", [P, ctypes.c_int, I64, I64], P)
acc = fn(base, "ggml_acc", [P, P, P, SZ, SZ, SZ, SZ], P)
new_graph = fn(base, "ggml_new_graph", [P], P)
expand = fn(base, "ggml_build_forward_expand", [P, P], None)
data = fn(base, "ggml_get_data_f32", [P], ctypes.POINTER(ctypes.c_float))
free = fn(base, "ggml_free", [P], None)
compute = fn(cpu, "ggml_graph_compute_with_ctx", [P, P, ctypes.c_int], ctypes.c_int)

W, ROWS, BW, BROWS, COL, ROW = 4096, 3, 4000, 2, 50, 1   # b goes into rows 1..2, columns 50..4049 of a
F32 = 0
ctx = ggml_init(InitParams(64 << 20, None, False))
a, b = new_2d(ctx, F32, W, ROWS), new_2d(ctx, F32, BW, BROWS)
av = [(i % 251) * 0.25 for i in range(W * ROWS)]
bv = [((j % 17) - 8) * 0.5 for j in range(BW * BROWS)]
pa, pb = data(a), data(b)
for i, v in enumerate(av): pa[i] = v
for j, v in enumerate(bv): pb[j] = v
out = acc(ctx, a, b, W * 4, W * ROWS * 4, W * ROWS * 4, (ROW * W + COL) * 4)
gf = new_graph(ctx)
expand(gf, out)
status = compute(ctx, gf, 2)
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
expected = list(av)
for r in range(BROWS):
    for c in range(BW):
        k = (ROW + r) * W + COL + c
        expected[k] = f32(av[k] + bv[r * BW + c])
po = data(out)
bad = [k for k in range(W * ROWS) if po[k] != expected[k]]
free(ctx)
print(json.dumps({"status": status, "checked": W * ROWS, "mismatches": len(bad), "first": bad[:5]}))
"""


def test_acc_with_4096_wide_rows_on_the_installed_cpu_backend(venv: Path, tmp_path: Path) -> None:
    got = _run(venv, ACC_CODE, tmp_path)
    assert got == {"status": 0, "checked": 4096 * 3, "mismatches": 0, "first": []}


LLAMA_CODE = """\
import json, sys
import numpy as np
import gguf
from llama_cpp import Llama

path = sys.argv[1]
n_embd, n_ff, n_head, n_layer, n_ctx = 32, 64, 4, 2, 64
tokens = ["<unk>", "<s>", "</s>", "<0x0A>", "\\u2581a", "\\u2581b", "a", "b"]
types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL, gguf.TokenType.BYTE] + [
    gguf.TokenType.NORMAL] * 4
w = gguf.GGUFWriter(path, "llama")
w.add_context_length(n_ctx)
w.add_embedding_length(n_embd)
w.add_block_count(n_layer)
w.add_feed_forward_length(n_ff)
w.add_head_count(n_head)
w.add_head_count_kv(n_head)
w.add_layer_norm_rms_eps(1e-5)
w.add_rope_dimension_count(n_embd // n_head)
w.add_tokenizer_model("llama")
w.add_token_list(tokens)
w.add_token_scores([0.0] * len(tokens))
w.add_token_types(types)
w.add_bos_token_id(1)
w.add_eos_token_id(2)
w.add_unk_token_id(0)
rng = np.random.default_rng(0)
rand = lambda *shape: (rng.standard_normal(shape) * 0.1).astype(np.float32)
ones = np.ones(n_embd, dtype=np.float32)
w.add_tensor("token_embd.weight", rand(len(tokens), n_embd))
w.add_tensor("output_norm.weight", ones)
w.add_tensor("output.weight", rand(len(tokens), n_embd))
for i in range(n_layer):
    w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
    for t in ("q", "k", "v", "output"):
        w.add_tensor(f"blk.{i}.attn_{t}.weight", rand(n_embd, n_embd))
    w.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
    w.add_tensor(f"blk.{i}.ffn_gate.weight", rand(n_ff, n_embd))
    w.add_tensor(f"blk.{i}.ffn_up.weight", rand(n_ff, n_embd))
    w.add_tensor(f"blk.{i}.ffn_down.weight", rand(n_embd, n_ff))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, n_threads=2, verbose=False)
ids = [1, 4, 5, 6, 7]
llm.eval(ids)
scores = np.asarray(llm.scores[: len(ids)])
print(json.dumps({"shape": list(scores.shape), "n_vocab": llm.n_vocab(), "n_tokens": llm.n_tokens,
                  "finite": bool(np.isfinite(scores).all()), "distinct_rows": len({r.tobytes() for r in scores})}))
"""


def test_a_tiny_llama_model_evaluates_through_the_wheel(venv: Path, tmp_path: Path) -> None:
    got = _run(venv, LLAMA_CODE, tmp_path, str(tmp_path / "tiny-llama.gguf"))
    assert got == {"shape": [5, 8], "n_vocab": 8, "n_tokens": 5, "finite": True, "distinct_rows": 5}


def test_a_second_build_is_reproducible_and_compiles_nothing(project: Project, built: WheelResult) -> None:
    again = build_wheel(project, replace(OPTIONS, out_dir=project.root / "dist2"))
    assert again.wheel.name == built.wheel.name
    assert again.prepared.written == 0 and again.compiled == 0
    assert (again.prepared.source_dir, again.prepared.build_dir) == (built.prepared.source_dir,
                                                                     built.prepared.build_dir)
    with zipfile.ZipFile(built.wheel) as z1, zipfile.ZipFile(again.wheel) as z2:
        assert z1.namelist() == z2.namelist()
        for name in z1.namelist():
            if name.endswith((".py", "patchset.json")):
                assert z1.read(name) == z2.read(name), name
            assert z1.getinfo(name).date_time == z2.getinfo(name).date_time, name
        differing = {n for n in z1.namelist() if z1.read(n) != z2.read(n)}
    # the libraries are the same too; llama.cpp's and ggml's install rules write scikit-build-core's
    # temporary install prefix into llama.pc and ggml-config.cmake, and RECORD holds their hashes
    # (docs/releasing.md)
    print(f"\nfiles that differ between the two wheels: {sorted(differing) or 'none'}")
    dist_info = next(n.split("/")[0] for n in z1.namelist() if n.endswith(".dist-info/RECORD"))
    assert differing <= {"lib/pkgconfig/llama.pc", "lib/cmake/ggml/ggml-config.cmake", f"{dist_info}/RECORD"}


def test_one_patch_less_gives_other_provenance_and_version(project: Project, built: WheelResult,
                                                           tmp_path: Path) -> None:
    # the same `prepare` that the build ran, on a copy of the project with the last patch left out
    names = [p.name for p in load_series(project.patches_dir).patches]
    fewer = _copy_project(tmp_path / "fewer", project.cache_dir, names[:-1])
    other = prepare(fewer, OPTIONS)
    full = built.prepared.provenance
    assert other.version != built.prepared.version
    assert other.version.split("+")[0] == built.prepared.version.split("+")[0]
    assert other.provenance["series"]["count"] == full["series"]["count"] - 1
    assert other.provenance["series"]["patches"] == full["series"]["patches"][:-1]
    assert other.provenance["series"]["hash"] != full["series"]["hash"]
    assert other.provenance["vendored"]["tree"] != full["vendored"]["tree"]
    assert other.provenance["upstream"] == full["upstream"]


def test_drift_reports_llama_opt_epoch_without_b1_and_nothing_with_it_or_on_the_pin(built: WheelResult,
                                                                                    project: Project) -> None:
    src = built.prepared.source_dir
    work = project.work_repo
    before = subprocess.run(["git", "-C", str(work), "show", "upstream:include/llama.h"], capture_output=True,
                            text=True, check=True).stdout
    after = (src / "vendor/llama.cpp/include/llama.h").read_text()
    bindings = subprocess.run(["git", "-C", str(project.series("bindings").work_repo), "show",
                               "upstream:llama_cpp/llama_cpp.py"], capture_output=True, text=True, check=True).stdout
    typedefs = drift.typedef_headers(src / "vendor/llama.cpp")
    found = drift.check(before, after, bindings, typedef_sources=typedefs)
    assert [d.function for d in found] == ["llama_opt_epoch"]
    assert "enum ggml_status" in found[0].problem
    # the staged bindings are B1's
    assert drift.check(before, after, (src / "llama_cpp/llama_cpp.py").read_text(), typedef_sources=typedefs) == []
    assert drift.check(before, before, bindings, typedef_sources=typedefs) == []
    # every function of the pin's header that the bindings declare agrees with them: the parser reads
    # the real files right (the bindings only lag behind, by functions they do not declare at all)
    every = drift.check(before, before, bindings, typedef_sources=typedefs,
                        functions=sorted(drift.parse_header(before, typedefs)))
    assert {d.problem for d in every} <= {"not declared in the bindings"}


# last in the module: its model needs the series' CPU build, which the build module's worker may still be making
@pytest.fixture(scope="module")
def opt_model(real_cpu_build: BuildResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A llama model with random weights, written by the patched tree's own generator
    (`test-llama-archs -a llama -o DIR`) from the session's CPU build (conftest.py real_cpu_build)."""
    assert real_cpu_build.ok, real_cpu_build.failure
    out = tmp_path_factory.mktemp("opt-model")
    subprocess.run([str(real_cpu_build.bin_dir / "test-llama-archs"), "-a", "llama", "-o", str(out)],
                   check=True, capture_output=True)
    return out / "llama-dense.gguf"


def _bindings_test(py: Path, test: Path, model: Path, cwd: Path) -> tuple[int, str]:
    """B1's test (`tests/test_llama_opt.py` of the bindings) run with the venv's pytest from an empty folder."""
    shutil.copyfile(test, cwd / test.name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["LLAMA_CPP_TEST_OPT_MODEL"] = str(model)
    # the aborted epoch (the abort callback stops its first step: quick even at -O0)
    r = subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "aborted", test.name],
                       cwd=cwd, capture_output=True, text=True, env=env, check=False, timeout=900)
    return r.returncode, r.stdout + r.stderr


def test_b1_returns_aborted_through_the_installed_wheel_and_is_proven_by_verify(
        venv: Path, built: WheelResult, opt_model: Path, project: Project, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    test = built.prepared.source_dir / "tests" / "test_llama_opt.py"
    (tmp_path / "after").mkdir()
    rc, out = _bindings_test(venv, test, opt_model, tmp_path / "after")
    assert rc == 0 and "1 passed" in out, out
    # B1 proven by verify, its python test on the bindings' before and after trees against the library this
    # wheel build left in its staged project (B1 changes Python only: nothing is compiled again)
    monkeypatch.setenv("PATCHSET_PYTHON", str(venv))
    monkeypatch.setenv("LLAMA_CPP_TEST_OPT_MODEL", str(opt_model))
    start = time.monotonic()
    [v] = verify(project.series("bindings"), backends=["cpu"], reuse=False).verdicts
    print(f"\nverify --series bindings: {time.monotonic() - start:.0f} s")
    assert v.outcome == PROVEN, v.reason
    assert v.evidence_json is not None
    steps = {s["tree"]: s for s in json.loads(v.evidence_json.read_text())["steps"]}
    assert (steps["before"]["verdict"], steps["after"]["verdict"]) == ("fails", "passes")
    lib = built.prepared.source_dir / "llama_cpp" / "lib"
    assert all(str(lib) in s["build_command"] for s in steps.values())
    assert (steps["after"]["tests"][0]["passed"], steps["before"]["tests"][0]["passed"]) == (2, 0)
    # without B1 the status is lost (None), not a name missing from the bindings
    assert any("returned None, not a ggml_status" in line for line in steps["before"]["tests"][0]["failing"]), \
        steps["before"]
