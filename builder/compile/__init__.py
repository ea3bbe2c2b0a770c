"""Building the tree and running its test programs: CMake profiles, toolchain, parsed results."""
