# patchset wheel --no-common: included by llama.cpp's project() (CMAKE_PROJECT_llama.cpp_INCLUDE). The
# bindings force LLAMA_BUILD_COMMON on in their cache; a normal variable of llama.cpp's own directory
# wins over it there (policy CMP0077), so common/ and the libllama-common.so it installs are left out.
set(LLAMA_BUILD_COMMON OFF)
