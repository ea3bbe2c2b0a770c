/* patchset Metal SDK stand-in: the target macros of Apple's <TargetConditionals.h> for macOS.
   The CPU is arm64 (Apple silicon) unless PATCHSET_METAL_SDK_X86_64 is defined, so that each
   of the tree's `#if TARGET_CPU_X86_64` branches is compiled by one of the two passes. */
#ifndef PATCHSET_TARGET_CONDITIONALS_H
#define PATCHSET_TARGET_CONDITIONALS_H

#define TARGET_OS_MAC 1
#define TARGET_OS_OSX 1
#define TARGET_OS_IPHONE 0
#define TARGET_OS_IOS 0
#define TARGET_OS_TV 0
#define TARGET_OS_WATCH 0
#define TARGET_OS_VISION 0
#define TARGET_OS_SIMULATOR 0
#define TARGET_OS_MACCATALYST 0

#ifdef PATCHSET_METAL_SDK_X86_64
#define TARGET_CPU_X86_64 1
#define TARGET_CPU_ARM64 0
#else
#define TARGET_CPU_X86_64 0
#define TARGET_CPU_ARM64 1
#endif

#endif
