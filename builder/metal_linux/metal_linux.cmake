# The metal-linux backend, included by builder/cmake/CMakeLists.txt when PATCHSET_METAL_LINUX is on.
#
# patchset-metal-linux: the tree's Metal host sources, every ggml/src/ggml-metal/*.m and *.cpp, compiled unchanged
# (the .m files with clang for the GNUstep runtime 2 against the toolchain of `patchset toolchain objc`), with the
# Metal stand-in of this folder (metal.m, dispatch.m, glue.cpp) and the CPU models of the kernels, the replay's own
# (../replay/cpp/replay-kernels.cpp, called through replay-abi.h). docs/backends.md says what it is.

if (NOT PATCHSET_OBJC_TOOLCHAIN OR NOT EXISTS ${PATCHSET_OBJC_TOOLCHAIN}/include/Foundation/Foundation.h)
    message(FATAL_ERROR "patchset: metal-linux: PATCHSET_OBJC_TOOLCHAIN (${PATCHSET_OBJC_TOOLCHAIN}) is not a built "
                        "Objective-C toolchain (patchset toolchain objc)")
endif()
enable_language(OBJC)
if (NOT CMAKE_OBJC_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "patchset: metal-linux: the Objective-C compiler must be clang (-DCMAKE_OBJC_COMPILER=clang)")
endif()

set(patchset_metal_dir ${PATCHSET_SOURCE}/ggml/src/ggml-metal)
if (NOT EXISTS ${patchset_metal_dir}/ggml-metal-device.m)
    message(FATAL_ERROR "patchset: metal-linux: ${patchset_metal_dir}/ggml-metal-device.m does not exist")
endif()
file(GLOB patchset_metal_tree_sources CONFIGURE_DEPENDS ${patchset_metal_dir}/*.cpp ${patchset_metal_dir}/*.m)

add_library(patchset-metal-linux OBJECT
    ${patchset_metal_tree_sources}
    ${PATCHSET_METAL_LINUX_DIR}/metal.m
    ${PATCHSET_METAL_LINUX_DIR}/dispatch.m
    ${PATCHSET_METAL_LINUX_DIR}/glue.cpp
    ${PATCHSET_REPLAY_DIR}/replay-abi.cpp
    ${PATCHSET_REPLAY_DIR}/replay-kernels.cpp)
# the toolchain's headers first (its objc/ and Block.h), then the Apple SDK stand-in (Metal/, dispatch/, mach/, ...)
target_include_directories(patchset-metal-linux PRIVATE
    ${PATCHSET_OBJC_TOOLCHAIN}/include
    ${PATCHSET_METAL_SDK_DIR} ${patchset_metal_dir} ${PATCHSET_SOURCE}/ggml/src ${PATCHSET_REPLAY_DIR})
target_link_libraries(patchset-metal-linux PUBLIC ggml)
# gnustep-config --objc-flags of the toolchain, manual reference counting as the tree's .m files are written
target_compile_options(patchset-metal-linux PRIVATE
    $<$<COMPILE_LANGUAGE:OBJC>:-fobjc-runtime=gnustep-2.0 -fblocks -fconstant-string-class=NSConstantString
        -fexceptions -fobjc-exceptions -fno-objc-arc -DGNUSTEP -DGNUSTEP_BASE_LIBRARY=1 -DGNUSTEP_RUNTIME=1
        -D_NONFRAGILE_ABI=1 -D_NATIVE_OBJC_EXCEPTIONS -pthread>)
# the kernel sources beside the programs, in the layout of the tree's own build without an embedded or compiled
# library (ggml-metal/CMakeLists.txt): its library loader compiles bin/kernels/*.metal ("falling back to cwd"; the
# test programs run in bin/), and our stand-in's compile reads the kernel names from them. re-copied when they change
file(MAKE_DIRECTORY ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/kernels)
configure_file(${PATCHSET_SOURCE}/ggml/src/ggml-common.h ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/ggml-common.h COPYONLY)
configure_file(${patchset_metal_dir}/ggml-metal-impl.h ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/ggml-metal-impl.h COPYONLY)
file(GLOB patchset_metal_kernel_files ${patchset_metal_dir}/kernels/*)
foreach(f IN LISTS patchset_metal_kernel_files)
    get_filename_component(n ${f} NAME)
    configure_file(${f} ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/kernels/${n} COPYONLY)
endforeach()
# ggml-metal.cpp gets <memory> through an Objective-C header on Apple platforms
set_source_files_properties(${patchset_metal_dir}/ggml-metal.cpp PROPERTIES COMPILE_OPTIONS "-include;memory")
# the tree's answer of which ops the device supports, narrowed to the ops whose kernels have a CPU model (glue.cpp)
target_link_options(patchset-metal-linux INTERFACE -Wl,--wrap=ggml_metal_device_supports_op)
target_link_libraries(patchset-metal-linux INTERFACE
    -L${PATCHSET_OBJC_TOOLCHAIN}/lib -Wl,-rpath,${PATCHSET_OBJC_TOOLCHAIN}/lib -lgnustep-base -lobjc -pthread)

# the kernel models' self-test, as metal-replay builds it (../replay/cpp/replay.cmake): `patchset test` and verify
# check the models against the tree's kernels with it (builder/prove/kernel_models.py)
add_executable(patchset-replay-selftest ${PATCHSET_REPLAY_DIR}/replay-selftest.cpp ${PATCHSET_REPLAY_DIR}/replay-kernels.cpp)
target_include_directories(patchset-replay-selftest PRIVATE ${patchset_metal_dir} ${PATCHSET_REPLAY_DIR})
target_link_libraries(patchset-replay-selftest PRIVATE ggml)
