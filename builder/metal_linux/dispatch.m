/* The part of libdispatch the tree's Metal host code calls (builder/metal_sdk/dispatch/dispatch.h declares it),
   on POSIX threads, for the metal-linux backend. Semantics of Apple's dispatch/{queue,group,semaphore,time}.h:

   - a concurrent queue (DISPATCH_QUEUE_CONCURRENT, the global queues) runs each dispatch_async block on a thread
     of its own; a serial queue runs its blocks one at a time, in submission order, on a thread of its own;
   - dispatch_apply runs the iterations on up to one thread per core (the calling thread among them) for a
     concurrent queue, one after another for a serial one, and returns when every iteration has returned;
   - groups and semaphores count as Apple documents, with timeouts of dispatch_time();
   - the objects are Objective-C objects as on macOS (OS_OBJECT_USE_OBJC): dispatch_retain/dispatch_release and
     -retain/-release are the same reference count. */

#import <Foundation/Foundation.h>
#include <dispatch/dispatch.h>

#include <Block.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define PS_NOT_MODELLED_EXIT 125
#include <unistd.h>

struct dispatch_queue_attr_s {
    int concurrent;
};
struct dispatch_queue_attr_s _dispatch_queue_attr_concurrent = { 1 };

static uint64_t ps_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

dispatch_time_t dispatch_time(dispatch_time_t when, int64_t delta) {
    if (when == DISPATCH_TIME_FOREVER) {
        return DISPATCH_TIME_FOREVER;
    }
    const uint64_t base = when == DISPATCH_TIME_NOW ? ps_now_ns() : when;
    if (delta < 0 && (uint64_t) -delta > base) {
        return 1;
    }
    return base + (uint64_t) delta;
}

/* a deadline for pthread_cond_timedwait (CLOCK_REALTIME) from a dispatch_time_t (monotonic) */
static struct timespec ps_deadline(dispatch_time_t t) {
    const uint64_t now = ps_now_ns();
    const uint64_t rel = t > now ? t - now : 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t) ts.tv_nsec + rel % NSEC_PER_SEC;
    ts.tv_sec += (time_t) (rel / NSEC_PER_SEC + ns / NSEC_PER_SEC);
    ts.tv_nsec = (long) (ns % NSEC_PER_SEC);
    return ts;
}

/* waits on cond until pred() or the deadline; 0 when pred() held, non-zero on time-out */
static intptr_t ps_wait(pthread_cond_t * cond, pthread_mutex_t * mutex, dispatch_time_t timeout, BOOL (^pred)(void)) {
    if (timeout == DISPATCH_TIME_FOREVER) {
        while (!pred()) {
            pthread_cond_wait(cond, mutex);
        }
        return 0;
    }
    const struct timespec ts = ps_deadline(timeout);
    while (!pred()) {
        if (pthread_cond_timedwait(cond, mutex, &ts) == ETIMEDOUT) {
            return pred() ? 0 : 1;
        }
    }
    return 0;
}

//
// queues
//

@interface PSDispatchQueue : NSObject <OS_dispatch_queue> {
@public
    BOOL            concurrent;
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    NSMutableArray * pending; /* serial queues: blocks not yet run */
    BOOL            worker;   /* serial queues: a thread is draining `pending` */
}
@end

@implementation PSDispatchQueue
- (instancetype)initConcurrent:(BOOL)c {
    if ((self = [super init])) {
        concurrent = c;
        pthread_mutex_init(&lock, NULL);
        pthread_cond_init(&cond, NULL);
        pending = [[NSMutableArray alloc] init];
    }
    return self;
}
- (void)dealloc {
    [pending release];
    pthread_cond_destroy(&cond);
    pthread_mutex_destroy(&lock);
    [super dealloc];
}
@end

struct ps_thread_arg {
    void (^block)(void);
};

static void * ps_thread_main(void * p) {
    struct ps_thread_arg * a = p;
    @autoreleasepool {
        a->block();
    }
    Block_release(a->block);
    free(a);
    return NULL;
}

static void ps_spawn(void (^block)(void)) {
    struct ps_thread_arg * a = malloc(sizeof(*a));
    a->block = Block_copy(block);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, ps_thread_main, a) != 0) {
        fprintf(stderr, "patchset dispatch: pthread_create failed\n");
        abort();
    }
    pthread_attr_destroy(&attr);
}

static PSDispatchQueue * ps_global = nil;
static pthread_once_t    ps_global_once = PTHREAD_ONCE_INIT;

static void ps_global_init(void) {
    ps_global = [[PSDispatchQueue alloc] initConcurrent:YES];
}

/* one concurrent queue stands for every global queue (the priorities only weigh scheduling) */
static PSDispatchQueue * ps_global_queue(void) {
    pthread_once(&ps_global_once, ps_global_init);
    return ps_global;
}

dispatch_queue_t dispatch_get_global_queue(intptr_t identifier, uintptr_t flags) {
    (void) identifier;
    (void) flags;
    return (dispatch_queue_t) ps_global_queue();
}

dispatch_queue_t dispatch_get_main_queue(void) {
    /* no main run loop here: the tree's host code does not use it. Not modelled: patchset's own exit status
       (testrun.NOT_MODELLED_EXIT), never a signal that would read as the test crashing */
    fflush(stdout);
    fprintf(stderr, "patchset dispatch: not modelled: dispatch_get_main_queue is not provided\n");
    _exit(PS_NOT_MODELLED_EXIT);
}

dispatch_queue_t dispatch_queue_create(const char * label, dispatch_queue_attr_t attr) {
    (void) label;
    const BOOL concurrent = attr != NULL && ((struct dispatch_queue_attr_s *) (void *) attr)->concurrent;
    return (dispatch_queue_t) [[PSDispatchQueue alloc] initConcurrent:concurrent];
}

void dispatch_async(dispatch_queue_t queue, dispatch_block_t block) {
    PSDispatchQueue * q = (PSDispatchQueue *) queue;
    if (q->concurrent) {
        ps_spawn(block);
        return;
    }
    dispatch_block_t copy = Block_copy(block);
    pthread_mutex_lock(&q->lock);
    [q->pending addObject:(id) copy];
    Block_release(copy);
    const BOOL start = !q->worker;
    q->worker = YES;
    pthread_mutex_unlock(&q->lock);
    if (start) {
        [q retain];
        ps_spawn(^{
            for (;;) {
                pthread_mutex_lock(&q->lock);
                if (q->pending.count == 0) {
                    q->worker = NO;
                    pthread_mutex_unlock(&q->lock);
                    break;
                }
                dispatch_block_t b = [[q->pending objectAtIndex:0] retain];
                [q->pending removeObjectAtIndex:0];
                pthread_mutex_unlock(&q->lock);
                b();
                [(id) b release];
            }
            [q release];
        });
    }
}

void dispatch_sync(dispatch_queue_t queue, dispatch_block_t block) {
    dispatch_semaphore_t done = dispatch_semaphore_create(0);
    dispatch_async(queue, ^{
        block();
        dispatch_semaphore_signal(done);
    });
    dispatch_semaphore_wait(done, DISPATCH_TIME_FOREVER);
    dispatch_release(done);
}

void dispatch_apply(size_t iterations, dispatch_queue_t queue, void (^block)(size_t iteration)) {
    PSDispatchQueue * q = (PSDispatchQueue *) queue;
    if (!q->concurrent || iterations <= 1) {
        for (size_t i = 0; i < iterations; ++i) {
            block(i);
        }
        return;
    }

    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    size_t n_threads = ncpu > 0 ? (size_t) ncpu : 1;
    if (n_threads > iterations) {
        n_threads = iterations;
    }

    __block atomic_size_t next = 0;
    void (^work)(void) = ^{
        for (;;) {
            const size_t i = atomic_fetch_add(&next, 1);
            if (i >= iterations) {
                break;
            }
            block(i);
        }
    };

    dispatch_group_t group = dispatch_group_create();
    for (size_t t = 1; t < n_threads; ++t) {
        dispatch_group_async(group, queue, work);
    }
    work();
    dispatch_group_wait(group, DISPATCH_TIME_FOREVER);
    dispatch_release(group);
}

//
// groups
//

@interface PSDispatchGroup : NSObject <OS_dispatch_group> {
@public
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    long            count;
}
@end

@implementation PSDispatchGroup
- (instancetype)init {
    if ((self = [super init])) {
        pthread_mutex_init(&lock, NULL);
        pthread_cond_init(&cond, NULL);
    }
    return self;
}
- (void)dealloc {
    pthread_cond_destroy(&cond);
    pthread_mutex_destroy(&lock);
    [super dealloc];
}
@end

dispatch_group_t dispatch_group_create(void) {
    return (dispatch_group_t) [[PSDispatchGroup alloc] init];
}

void dispatch_group_enter(dispatch_group_t group) {
    PSDispatchGroup * g = (PSDispatchGroup *) group;
    pthread_mutex_lock(&g->lock);
    g->count++;
    pthread_mutex_unlock(&g->lock);
}

void dispatch_group_leave(dispatch_group_t group) {
    PSDispatchGroup * g = (PSDispatchGroup *) group;
    pthread_mutex_lock(&g->lock);
    if (--g->count < 0) {
        /* libdispatch crashes on an unbalanced leave */
        fprintf(stderr, "patchset dispatch: unbalanced dispatch_group_leave()\n");
        abort();
    }
    if (g->count == 0) {
        pthread_cond_broadcast(&g->cond);
    }
    pthread_mutex_unlock(&g->lock);
}

void dispatch_group_async(dispatch_group_t group, dispatch_queue_t queue, dispatch_block_t block) {
    dispatch_group_enter(group);
    [(id) group retain];
    /* the block literal below retains `block` when dispatch_async copies it (blocks capture blocks by copy) */
    dispatch_async(queue, ^{
        block();
        dispatch_group_leave(group);
        [(id) group release];
    });
}

intptr_t dispatch_group_wait(dispatch_group_t group, dispatch_time_t timeout) {
    PSDispatchGroup * g = (PSDispatchGroup *) group;
    pthread_mutex_lock(&g->lock);
    const intptr_t res = ps_wait(&g->cond, &g->lock, timeout, ^BOOL { return g->count == 0; });
    pthread_mutex_unlock(&g->lock);
    return res;
}

//
// semaphores
//

@interface PSDispatchSemaphore : NSObject <OS_dispatch_semaphore> {
@public
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    intptr_t        value;
}
@end

@implementation PSDispatchSemaphore
- (void)dealloc {
    pthread_cond_destroy(&cond);
    pthread_mutex_destroy(&lock);
    [super dealloc];
}
@end

dispatch_semaphore_t dispatch_semaphore_create(intptr_t value) {
    if (value < 0) {
        return NULL; /* as libdispatch */
    }
    PSDispatchSemaphore * s = [[PSDispatchSemaphore alloc] init];
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->value = value;
    return (dispatch_semaphore_t) s;
}

intptr_t dispatch_semaphore_wait(dispatch_semaphore_t dsema, dispatch_time_t timeout) {
    PSDispatchSemaphore * s = (PSDispatchSemaphore *) dsema;
    pthread_mutex_lock(&s->lock);
    const intptr_t res = ps_wait(&s->cond, &s->lock, timeout, ^BOOL { return s->value > 0; });
    if (res == 0) {
        s->value--;
    }
    pthread_mutex_unlock(&s->lock);
    return res;
}

intptr_t dispatch_semaphore_signal(dispatch_semaphore_t dsema) {
    PSDispatchSemaphore * s = (PSDispatchSemaphore *) dsema;
    pthread_mutex_lock(&s->lock);
    s->value++;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

//
// objects
//

void dispatch_retain(dispatch_object_t object) {
    [(id) object retain];
}

void dispatch_release(dispatch_object_t object) {
    [(id) object release];
}
