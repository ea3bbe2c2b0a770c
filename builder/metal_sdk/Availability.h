/* patchset Metal SDK stand-in: the SDK version macros of Apple's <Availability.h>, for the
   newest SDK the stand-in declares (macOS 26), so that every `>= SDK version` branch of the
   tree is compiled. Versions are MMmmpp as in Apple's header (15.0 is 150000). */
#ifndef PATCHSET_AVAILABILITY_H
#define PATCHSET_AVAILABILITY_H

#define __MAC_OS_X_VERSION_MIN_REQUIRED 140000
#define __MAC_OS_X_VERSION_MAX_ALLOWED 260000
#define __IPHONE_OS_VERSION_MAX_ALLOWED 0
#define __TV_OS_VERSION_MAX_ALLOWED 0
#define __VISION_OS_VERSION_MAX_ALLOWED 0

#endif

/* clang 14 predates visionOS (Apple's clang knows it since 15): `@available(..., visionOS 2.0, *)`
   is an error there. Any platform other than macOS leaves the macOS check as it is, so the name
   is read as one clang 14 knows. */
#ifndef visionOS
#define visionOS watchOS
#endif
