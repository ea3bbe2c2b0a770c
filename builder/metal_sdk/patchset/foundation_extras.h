/* patchset Metal SDK stand-in: Foundation API of Apple's SDK that GNUstep base (1.28) does not
   declare, as categories on GNUstep's classes (signatures: Apple's Foundation headers, file
   named on each). */
#ifndef PATCHSET_FOUNDATION_EXTRAS_H
#define PATCHSET_FOUNDATION_EXTRAS_H

#import <Foundation/Foundation.h>

/* Apple's nil is a void pointer (objc/objc.h: __DARWIN_NULL), GNUstep's an `id`: the tree assigns
   nil to C struct pointers, which only the former allows without a warning */
#undef nil
#define nil ((void *) 0)

/* NSFileManager.h (macOS 10.5) */
@interface NSFileManager (PatchsetAppleSDK)
- (NSString *)destinationOfSymbolicLinkAtPath:(NSString *)path error:(NSError **)error;
@end

#endif
