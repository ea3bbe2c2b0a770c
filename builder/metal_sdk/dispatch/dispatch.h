/* patchset Metal SDK stand-in: the part of libdispatch (Grand Central Dispatch) the tree uses.
   Signatures: Apple's dispatch/{queue,group,semaphore,time,object}.h, the same in the open-source
   swift-corelibs-libdispatch. In Objective-C the objects are Objective-C objects, as Apple's
   os/object.h declares them when OS_OBJECT_USE_OBJC is 1 (macOS's default): `NSObject<OS_dispatch_queue>
   *` and so on, so messages to them (`retain`, `release`) and their use as `id` compile as on macOS;
   in C and C++ they are plain C pointers, as libdispatch declares them without Objective-C. */
#ifndef PATCHSET_DISPATCH_H
#define PATCHSET_DISPATCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <unistd.h> /* Apple's dispatch.h includes it */
#include <sys/qos.h>
#if defined(__OBJC__)
#import <Foundation/NSObject.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__OBJC__)
/* os/object.h: OS_OBJECT_DECL_CLASS, OS_OBJECT_DECL_SUBCLASS */
@protocol OS_dispatch_object <NSObject>
@end
typedef NSObject<OS_dispatch_object> * dispatch_object_t;
#define PATCHSET_DISPATCH_DECL(name) \
    @protocol OS_##name <OS_dispatch_object> \
    @end \
    typedef NSObject<OS_##name> * name##_t
PATCHSET_DISPATCH_DECL(dispatch_queue);
PATCHSET_DISPATCH_DECL(dispatch_queue_attr);
PATCHSET_DISPATCH_DECL(dispatch_group);
PATCHSET_DISPATCH_DECL(dispatch_semaphore);
#else
typedef struct dispatch_queue_s * dispatch_queue_t;
typedef struct dispatch_queue_attr_s * dispatch_queue_attr_t;
typedef struct dispatch_group_s * dispatch_group_t;
typedef struct dispatch_semaphore_s * dispatch_semaphore_t;

typedef union {
    struct dispatch_object_s * _do;
    struct dispatch_queue_s * _dq;
    struct dispatch_group_s * _dg;
    struct dispatch_semaphore_s * _dsema;
} dispatch_object_t __attribute__((__transparent_union__));
#endif

typedef uint64_t dispatch_time_t;
typedef long dispatch_queue_priority_t;
typedef void (^dispatch_block_t)(void);

#define DISPATCH_TIME_NOW (0ull)
#define DISPATCH_TIME_FOREVER (~0ull)
#define NSEC_PER_SEC 1000000000ull
#define NSEC_PER_MSEC 1000000ull

#define DISPATCH_QUEUE_SERIAL ((dispatch_queue_attr_t) 0)
extern struct dispatch_queue_attr_s _dispatch_queue_attr_concurrent;
#define DISPATCH_QUEUE_CONCURRENT ((dispatch_queue_attr_t) (void *) &_dispatch_queue_attr_concurrent)

#define DISPATCH_QUEUE_PRIORITY_HIGH 2
#define DISPATCH_QUEUE_PRIORITY_DEFAULT 0
#define DISPATCH_QUEUE_PRIORITY_LOW (-2)
#define DISPATCH_QUEUE_PRIORITY_BACKGROUND INT16_MIN

/* queue.h */
dispatch_queue_t dispatch_queue_create(const char * label, dispatch_queue_attr_t attr);
dispatch_queue_t dispatch_get_global_queue(intptr_t identifier, uintptr_t flags);
dispatch_queue_t dispatch_get_main_queue(void);
void dispatch_async(dispatch_queue_t queue, dispatch_block_t block);
void dispatch_sync(dispatch_queue_t queue, dispatch_block_t block);
void dispatch_apply(size_t iterations, dispatch_queue_t queue, void (^block)(size_t iteration));

/* group.h */
dispatch_group_t dispatch_group_create(void);
void dispatch_group_async(dispatch_group_t group, dispatch_queue_t queue, dispatch_block_t block);
intptr_t dispatch_group_wait(dispatch_group_t group, dispatch_time_t timeout);
void dispatch_group_enter(dispatch_group_t group);
void dispatch_group_leave(dispatch_group_t group);

/* semaphore.h */
dispatch_semaphore_t dispatch_semaphore_create(intptr_t value);
intptr_t dispatch_semaphore_wait(dispatch_semaphore_t dsema, dispatch_time_t timeout);
intptr_t dispatch_semaphore_signal(dispatch_semaphore_t dsema);

/* time.h */
dispatch_time_t dispatch_time(dispatch_time_t when, int64_t delta);

/* object.h */
void dispatch_retain(dispatch_object_t object);
void dispatch_release(dispatch_object_t object);

#ifdef __cplusplus
}
#endif

#endif
