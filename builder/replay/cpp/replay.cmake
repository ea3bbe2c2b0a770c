# The host-side Metal replay, included by builder/cmake/CMakeLists.txt when PATCHSET_METAL_REPLAY is on.
#
# patchset-metal-replay: the tree's Metal host C++ (every ggml/src/ggml-metal/*.cpp: the backend interface, the op
# encoders, the pipeline lookups, the common helpers), compiled unchanged, with our replacement of the Objective-C
# device and context (replay-device.cpp, replay-context.cpp) and the CPU models of the kernels (replay-kernels.cpp).
# patchset-replay-selftest: the kernel models checked against hand-computed results.

set(patchset_metal_dir ${PATCHSET_SOURCE}/ggml/src/ggml-metal)
if (NOT EXISTS ${patchset_metal_dir}/ggml-metal-device.h)
    message(FATAL_ERROR "patchset: metal replay: ${patchset_metal_dir}/ggml-metal-device.h does not exist")
endif()

# re-globbed at build time: a tree that adds or removes a Metal host source reconfigures
file(GLOB patchset_metal_tree_sources CONFIGURE_DEPENDS ${patchset_metal_dir}/*.cpp)
file(GLOB patchset_metal_shaders ${patchset_metal_dir}/kernels/*.metal ${patchset_metal_dir}/*.metal)

# the names of the kernels the tree's shaders define: a pipeline the replay is asked to compile must name one of
# them, as a real Metal library would require
set(patchset_kernel_names "")
foreach(shader IN LISTS patchset_metal_shaders)
    file(STRINGS ${shader} lines REGEX "host_name\\(\"[A-Za-z0-9_]+\"\\)|^kernel void [A-Za-z0-9_]+\\(")
    foreach(line IN LISTS lines)
        if (line MATCHES "host_name\\(\"([A-Za-z0-9_]+)\"\\)")
            list(APPEND patchset_kernel_names ${CMAKE_MATCH_1})
        elseif (line MATCHES "^kernel void ([A-Za-z0-9_]+)\\(")
            list(APPEND patchset_kernel_names ${CMAKE_MATCH_1})
        endif()
    endforeach()
endforeach()
list(REMOVE_DUPLICATES patchset_kernel_names)
list(LENGTH patchset_kernel_names patchset_n_kernels)
if (patchset_n_kernels EQUAL 0)
    message(FATAL_ERROR "patchset: metal replay: no kernel names found in ${patchset_metal_dir}")
endif()
set(patchset_kernel_inc "")
foreach(name IN LISTS patchset_kernel_names)
    string(APPEND patchset_kernel_inc "    \"${name}\",\n")
endforeach()
# written only when the names change, so that switching trees recompiles nothing else
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/replay/replay-tree-kernels.inc CONTENT "${patchset_kernel_inc}" @ONLY)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${patchset_metal_shaders})
message(STATUS "patchset: metal replay: ${patchset_n_kernels} kernel names in the tree's shaders")

add_library(patchset-metal-replay OBJECT
    ${patchset_metal_tree_sources}
    ${PATCHSET_REPLAY_DIR}/replay-device.cpp
    ${PATCHSET_REPLAY_DIR}/replay-context.cpp
    ${PATCHSET_REPLAY_DIR}/replay-kernels.cpp)
target_include_directories(patchset-metal-replay PRIVATE
    ${patchset_metal_dir} ${PATCHSET_SOURCE}/ggml/src ${PATCHSET_REPLAY_DIR} ${CMAKE_BINARY_DIR}/replay)
target_link_libraries(patchset-metal-replay PUBLIC ggml)
# ggml-metal.cpp gets <memory> through an Objective-C header on Apple platforms
set_source_files_properties(${patchset_metal_dir}/ggml-metal.cpp PROPERTIES COMPILE_OPTIONS "-include;memory")

add_executable(patchset-replay-selftest ${PATCHSET_REPLAY_DIR}/replay-selftest.cpp ${PATCHSET_REPLAY_DIR}/replay-kernels.cpp)
target_include_directories(patchset-replay-selftest PRIVATE ${patchset_metal_dir} ${PATCHSET_REPLAY_DIR})
target_link_libraries(patchset-replay-selftest PRIVATE ggml)
