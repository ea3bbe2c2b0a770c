"""Run by tools/gpu/run.sh's `wheel` step with the Python of a new venv where only the built wheel
(and its runtime dependencies) is installed, from an empty folder: what the installed package holds
and whether ggml finds the backend it was built for."""

import glob
import os

import llama_cpp

here = os.path.dirname(llama_cpp.__file__)
print("llama_cpp", llama_cpp.__version__, "from", here)
print("libraries:", sorted(os.path.basename(p) for p in glob.glob(os.path.join(here, "lib", "*.so*"))))
print("gpu offload:", llama_cpp.llama_supports_gpu_offload())
llama_cpp.llama_backend_init()
print("system info:", llama_cpp.llama_print_system_info().decode())
