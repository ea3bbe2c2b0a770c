/* A Metal stand-in for the metal-linux backend: the classes behind the protocols of builder/metal_sdk/Metal/Metal.h,
   enough for the tree's ggml-metal-device.m and ggml-metal-context.m to run unchanged on Linux. docs/backends.md
   says what it is and is not; the choices where Apple leaves behaviour open are listed there too. In short:

   - buffers are host memory; the device has unified memory;
   - a library "compiled" from source knows the kernels the source defines (`kernel void NAME(` and
     `[[host_name("NAME")]]`); a compute pipeline is made only for a kernel with a CPU model (builder/replay/cpp,
     through replay-abi.h: the replay's models, not a copy), otherwise it fails as a failed compile does, with an
     error that names the kernel;
   - encoders record commands; a command buffer runs them when the queue reaches it, on the queue's thread, in
     enqueue order (a command buffer enqueued and not committed holds up those behind it, as on Metal); a compute
     dispatch runs the kernel's model on every thread of the grid, one after another;
   - a dispatch whose model reads or writes through a nil binding or outside a bound buffer performs none of those
     accesses, and the command buffer ends with MTLCommandBufferStatusError, MTLCommandBufferErrorPageFault: what
     an Apple GPU reports for an access to an unmapped address ("GPU Address Fault"); a nil binding the kernel does
     not use is no error (Metal allows binding nil);
   - a method with an NSError ** out-parameter sets it to nil on success (see ps_no_error);
   - status, enqueue, commit, addCompletedHandler and waitUntilCompleted follow MTLCommandBuffer.h: handlers run
     after the status is final, in the order added; adding one after commit, or waiting on a command buffer never
     committed, is stopped as Metal's API validation stops it. */

#import <Foundation/Foundation.h>
#include <Metal/Metal.h>

#include "replay-abi.h"

#include <Block.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PS_MAX_BINDINGS 31 /* Metal's buffer argument table */

/* MTLCommandBuffer.h: MTLCommandBufferErrorDomain, MTLCommandBufferError */
static NSString * const PSCommandBufferErrorDomain = @"MTLCommandBufferErrorDomain";
enum { PSCommandBufferErrorInternal = 1, PSCommandBufferErrorPageFault = 3 };
/* MTLLibrary.h: MTLLibraryErrorDomain, MTLLibraryErrorCompileFailure */
static NSString * const PSLibraryErrorDomain = @"MTLLibraryErrorDomain";
enum { PSLibraryErrorCompileFailure = 3, PSLibraryErrorFileNotFound = 6 };

static NSError * ps_error(NSString * domain, NSInteger code, NSString * text) {
    return [NSError errorWithDomain:domain code:code userInfo:@{ NSLocalizedDescriptionKey: text }];
}

/* on success the error out-parameter is set to nil: Cocoa's convention leaves it untouched, but the tree reads it
   without initializing it (ggml_metal_buffer_rset_init: `NSError * error;` then `if (error)`), which works on macOS
   only because Metal clears it */
static void ps_no_error(NSError ** error) {
    if (error) {
        *error = nil;
    }
}

static void ps_validation_failure(const char * what) {
    /* Metal's API validation stops the process at a misuse; so does the stand-in */
    fprintf(stderr, "patchset metal stand-in: API misuse: %s\n", what);
    abort();
}

/* what the stand-in does not model stops the run with patchset's own exit status (testrun.NOT_MODELLED_EXIT),
   never a signal: such a run checked nothing, and is never a failing test nor a crash */
#define PS_NOT_MODELLED_EXIT 125
__attribute__((noreturn)) static void ps_not_modelled(const char * what) {
    fflush(stdout);
    fprintf(stderr, "patchset metal stand-in: not modelled: %s\n", what);
    _exit(PS_NOT_MODELLED_EXIT);
}

@class PSDevice;
@class PSCommandQueue;

//
// MTLFunctionConstantValues, MTLCompileOptions, MTLResidencySetDescriptor, capture
//

#define PS_MAX_FC 64

@implementation MTLFunctionConstantValues {
@public
    int32_t fc[2*PS_MAX_FC];
    int     n_fc;
}
- (void)setConstantValue:(const void *)value type:(MTLDataType)type atIndex:(NSUInteger)index {
    int32_t v = 0;
    switch (type) {
        case MTLDataTypeBool:
        case MTLDataTypeUChar:  v = *(const uint8_t  *) value; break;
        case MTLDataTypeChar:   v = *(const int8_t   *) value; break;
        case MTLDataTypeShort:  v = *(const int16_t  *) value; break;
        case MTLDataTypeUShort: v = *(const uint16_t *) value; break;
        case MTLDataTypeInt:
        case MTLDataTypeUInt:   v = *(const int32_t  *) value; break;
        default:
            ps_not_modelled("setConstantValue: a type the stand-in does not hold");
    }
    for (int i = 0; i < n_fc; ++i) {
        if (fc[2*i] == (int32_t) index) {
            fc[2*i + 1] = v;
            return;
        }
    }
    if (n_fc == PS_MAX_FC) {
        ps_validation_failure("too many function constants");
    }
    fc[2*n_fc] = (int32_t) index;
    fc[2*n_fc + 1] = v;
    n_fc++;
}
- (void)setConstantValues:(const void *)values type:(MTLDataType)type withRange:(NSRange)range {
    const size_t size = type == MTLDataTypeInt || type == MTLDataTypeUInt ? 4 :
                        type == MTLDataTypeShort || type == MTLDataTypeUShort ? 2 : 1;
    for (NSUInteger i = 0; i < range.length; ++i) {
        [self setConstantValue:(const char *) values + i*size type:type atIndex:range.location + i];
    }
}
- (void)setConstantValue:(const void *)value type:(MTLDataType)type withName:(NSString *)name {
    (void) value; (void) type; (void) name;
    ps_not_modelled("function constants by name are not provided (the tree sets them by index)");
}
- (void)reset {
    n_fc = 0;
}
@end

@implementation MTLCompileOptions
@synthesize preprocessorMacros;
@synthesize fastMathEnabled;
@synthesize mathMode;
@synthesize languageVersion;
- (id)copyWithZone:(NSZone *)zone {
    MTLCompileOptions * o = [[MTLCompileOptions allocWithZone:zone] init];
    o.preprocessorMacros = self.preprocessorMacros;
    o.fastMathEnabled = self.fastMathEnabled;
    o.mathMode = self.mathMode;
    o.languageVersion = self.languageVersion;
    return o;
}
- (void)dealloc {
    [preprocessorMacros release];
    [super dealloc];
}
@end

@implementation MTLResidencySetDescriptor
@synthesize label;
@synthesize initialCapacity;
- (id)copyWithZone:(NSZone *)zone {
    MTLResidencySetDescriptor * d = [[MTLResidencySetDescriptor allocWithZone:zone] init];
    d.label = self.label;
    d.initialCapacity = self.initialCapacity;
    return d;
}
- (void)dealloc {
    [label release];
    [super dealloc];
}
@end

@implementation MTLCaptureDescriptor
@synthesize captureObject;
@synthesize destination;
@synthesize outputURL;
- (id)copyWithZone:(NSZone *)zone {
    MTLCaptureDescriptor * d = [[MTLCaptureDescriptor allocWithZone:zone] init];
    d.captureObject = self.captureObject;
    d.destination = self.destination;
    d.outputURL = self.outputURL;
    return d;
}
@end

@implementation MTLCaptureManager
+ (MTLCaptureManager *)sharedCaptureManager {
    static MTLCaptureManager * m = nil;
    @synchronized (self) {
        if (m == nil) {
            m = [[MTLCaptureManager alloc] init];
        }
    }
    return m;
}
- (id<MTLCaptureScope>)newCaptureScopeWithDevice:(id<MTLDevice>)device { (void) device; return nil; }
- (id<MTLCaptureScope>)newCaptureScopeWithCommandQueue:(id<MTLCommandQueue>)q { (void) q; return nil; }
- (BOOL)supportsDestination:(MTLCaptureDestination)destination { (void) destination; return NO; }
- (BOOL)startCaptureWithDescriptor:(MTLCaptureDescriptor *)descriptor error:(NSError **)error {
    (void) descriptor;
    if (error) {
        *error = ps_error(@"MTLCaptureErrorDomain", 1, @"the Metal stand-in has no GPU capture");
    }
    return NO;
}
- (void)stopCapture {}
- (BOOL)isCapturing { return NO; }
@end

//
// buffers
//

@interface PSBuffer : NSObject <MTLBuffer> {
@public
    PSDevice * dev;
    char     * data;
    NSUInteger len;
    MTLResourceOptions opts;
    void (^deallocator)(void *, NSUInteger);
    BOOL owned;
}
@end

//
// device
//

@interface PSDevice : NSObject <MTLDevice> {
@public
    atomic_size_t allocated;
}
@end

@implementation PSBuffer
@synthesize label;
- (id<MTLDevice>)device { return dev; }
- (MTLStorageMode)storageMode { return (MTLStorageMode) ((opts >> MTLResourceStorageModeShift) & 0xf); }
- (MTLResourceOptions)resourceOptions { return opts; }
- (NSUInteger)allocatedSize { return len; }
- (NSUInteger)length { return len; }
- (void *)contents {
    /* a private buffer has no CPU address on Metal */
    return self.storageMode == MTLStorageModePrivate ? NULL : data;
}
- (void)didModifyRange:(NSRange)range { (void) range; }
- (uint64_t)gpuAddress { return (uint64_t) (uintptr_t) data; }
- (void)dealloc {
    if (owned) {
        free(data);
    } else if (deallocator) {
        deallocator(data, len);
        Block_release(deallocator);
    }
    atomic_fetch_sub(&dev->allocated, len);
    [dev release];
    [label release];
    [super dealloc];
}
@end

//
// library, function, pipeline
//

@interface PSFunction : NSObject <MTLFunction> {
@public
    PSDevice * dev;
    NSString * fname;
    int32_t    fc[2*PS_MAX_FC];
    int        n_fc;
}
@end

@implementation PSFunction
@synthesize label;
- (id<MTLDevice>)device { return dev; }
- (NSString *)name { return fname; }
- (void)dealloc {
    [dev release];
    [fname release];
    [label release];
    [super dealloc];
}
@end

@interface PSLibrary : NSObject <MTLLibrary> {
@public
    PSDevice * dev;
    NSArray<NSString *> * names;
}
@end

@implementation PSLibrary
@synthesize label;
- (id<MTLDevice>)device { return dev; }
- (NSArray<NSString *> *)functionNames { return names; }
- (id<MTLFunction>)newFunctionWithName:(NSString *)functionName {
    return [self newFunctionWithName:functionName constantValues:nil error:NULL];
}
- (id<MTLFunction>)newFunctionWithName:(NSString *)name constantValues:(MTLFunctionConstantValues *)constantValues
                                 error:(NSError **)error {
    if (![names containsObject:name]) {
        if (error) {
            *error = ps_error(PSLibraryErrorDomain, PSLibraryErrorCompileFailure,
                              [NSString stringWithFormat:@"function %@ was not found in the library", name]);
        }
        return nil;
    }
    ps_no_error(error);
    PSFunction * f = [[PSFunction alloc] init];
    f->dev   = [dev retain];
    f->fname = [name copy];
    if (constantValues) {
        f->n_fc = constantValues->n_fc;
        memcpy(f->fc, constantValues->fc, sizeof(f->fc));
    }
    return f;
}
- (void)dealloc {
    [dev release];
    [names release];
    [label release];
    [super dealloc];
}
@end

@interface PSPipeline : NSObject <MTLComputePipelineState> {
@public
    PSDevice * dev;
    PSFunction * fn;
}
@end

@implementation PSPipeline
- (NSString *)label { return fn->fname; }
- (id<MTLDevice>)device { return dev; }
/* an Apple-silicon GPU's limits for the simple kernels */
- (NSUInteger)maxTotalThreadsPerThreadgroup { return 1024; }
- (NSUInteger)threadExecutionWidth { return 32; }
- (NSUInteger)staticThreadgroupMemoryLength { return 0; }
- (void)dealloc {
    [dev release];
    [fn release];
    [super dealloc];
}
@end

/* the kernels a Metal source defines: `kernel void NAME(` and `[[host_name("NAME")]]` */
static NSArray<NSString *> * ps_kernel_names(NSString * source) {
    NSMutableOrderedSet * out = [NSMutableOrderedSet orderedSet];
    const char * s = [source UTF8String];
    const char * heads[2] = { "host_name(\"", "kernel void " };
    for (int h = 0; h < 2; ++h) {
        const size_t hl = strlen(heads[h]);
        for (const char * p = strstr(s, heads[h]); p; p = strstr(p + 1, heads[h])) {
            if (h == 1 && p != s && p[-1] != '\n') {
                continue; /* at the start of a line only */
            }
            const char * b = p + hl;
            const char * e = b;
            while ((*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z') || (*e >= '0' && *e <= '9') || *e == '_') {
                e++;
            }
            if (e > b && ((h == 0 && *e == '"') || (h == 1 && *e == '('))) {
                [out addObject:[[[NSString alloc] initWithBytes:b length:(NSUInteger) (e - b)
                                                       encoding:NSUTF8StringEncoding] autorelease]];
            }
        }
    }
    return [out array];
}

//
// events, residency sets
//

@interface PSSharedEvent : NSObject <MTLSharedEvent> {
@public
    PSDevice * dev;
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    uint64_t        value;
}
@end

@implementation PSSharedEvent
@synthesize label;
- (id<MTLDevice>)device { return dev; }
- (uint64_t)signaledValue {
    pthread_mutex_lock(&lock);
    const uint64_t v = value;
    pthread_mutex_unlock(&lock);
    return v;
}
- (void)setSignaledValue:(uint64_t)v {
    pthread_mutex_lock(&lock);
    value = v;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}
- (BOOL)waitUntilSignaledValue:(uint64_t)v timeoutMS:(uint64_t)ms {
    dispatch_time_t t = dispatch_time(DISPATCH_TIME_NOW, (int64_t) (ms*NSEC_PER_MSEC));
    BOOL ok = YES;
    pthread_mutex_lock(&lock);
    while (value < v) {
        pthread_mutex_unlock(&lock);
        if (dispatch_time(DISPATCH_TIME_NOW, 0) >= t) {
            ok = NO;
            pthread_mutex_lock(&lock);
            break;
        }
        usleep(100);
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return ok;
}
- (void)dealloc {
    [dev release];
    [label release];
    pthread_cond_destroy(&cond);
    pthread_mutex_destroy(&lock);
    [super dealloc];
}
@end

@interface PSResidencySet : NSObject <MTLResidencySet> {
@public
    PSDevice * dev;
    NSString * lbl;
    NSMutableArray * allocs;
}
@end

@implementation PSResidencySet
- (id<MTLDevice>)device { return dev; }
- (NSString *)label { return lbl; }
- (uint64_t)allocatedSize {
    uint64_t n = 0;
    for (id<MTLAllocation> a in allocs) {
        n += a.allocatedSize;
    }
    return n;
}
- (NSArray<id<MTLAllocation>> *)allAllocations { return [[allocs copy] autorelease]; }
- (NSUInteger)allocationCount { return allocs.count; }
/* all host memory is resident */
- (void)requestResidency {}
- (void)endResidency {}
/* a nil allocation (the tree adds the nil Metal buffer of a zero-size mapping) is ignored: the parameter is nonnull in
   MTLResidencySet.h and Apple documents no error for it; Metal's own set is not an NSArray that raises */
- (void)addAllocation:(id<MTLAllocation>)a { if (a != nil && ![allocs containsObject:a]) { [allocs addObject:a]; } }
- (void)removeAllocation:(id<MTLAllocation>)a { if (a != nil) { [allocs removeObject:a]; } }
- (void)removeAllAllocations { [allocs removeAllObjects]; }
- (BOOL)containsAllocation:(id<MTLAllocation>)a { return [allocs containsObject:a]; }
- (void)commit {}
- (void)dealloc {
    [dev release];
    [lbl release];
    [allocs release];
    [super dealloc];
}
@end

//
// commands
//

/* one binding of the compute argument table */
struct ps_binding {
    PSBuffer * buf;   /* retained; nil with bytes == NULL: nothing or nil bound */
    NSUInteger offs;
    void     * bytes; /* setBytes: a copy, owned */
    size_t     n_bytes;
    BOOL       set;
};

@interface PSCommandBuffer : NSObject <MTLCommandBuffer> {
@public
    PSDevice       * dev;
    PSCommandQueue * queue;
    NSMutableArray * commands;  /* PSCommand */
    NSMutableArray * completed; /* handlers */
    NSError        * err;
    pthread_mutex_t  lock;
    pthread_cond_t   cond;
    MTLCommandBufferStatus st;
    BOOL             handled; /* the completed handlers have run: waitUntilCompleted returns after them */
}
- (void)addCommand:(NSError * (^)(void))run cleanup:(void (^)(void))cleanup;
@end

/* a recorded command: run() on the queue's thread returns nil or the error that ends the command buffer;
   cleanup() releases what the command holds */
@interface PSCommand : NSObject {
@public
    NSError * (^run)(void);
    void (^cleanup)(void);
}
@end

@implementation PSCommand
- (void)dealloc {
    if (cleanup) {
        cleanup();
    }
    Block_release(run);
    if (cleanup) {
        Block_release(cleanup);
    }
    [super dealloc];
}
@end

@interface PSComputeEncoder : NSObject <MTLComputeCommandEncoder> {
@public
    PSCommandBuffer * cb;
    PSPipeline      * pipeline;
    struct ps_binding b[PS_MAX_BINDINGS];
    MTLDispatchType   type;
    BOOL              ended;
}
@end

@interface PSBlitEncoder : NSObject <MTLBlitCommandEncoder> {
@public
    PSCommandBuffer * cb;
    BOOL              ended;
}
@end

@interface PSCommandQueue : NSObject <MTLCommandQueue> {
@public
    PSDevice       * dev;
    pthread_mutex_t  lock;
    pthread_cond_t   cond;
    NSMutableArray * order; /* enqueued command buffers, in enqueue order, not yet run */
    BOOL             stop;
    pthread_t        thread;
    BOOL             has_thread;
}
- (void)enqueueBuffer:(PSCommandBuffer *)cb;
- (void)kick;
@end

static void ps_encoder_check(BOOL ended, const char * what) {
    if (ended) {
        ps_validation_failure(what);
    }
}

@implementation PSComputeEncoder
@synthesize label;
- (id<MTLDevice>)device { return cb->dev; }
- (MTLDispatchType)dispatchType { return type; }
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state {
    ps_encoder_check(ended, "setComputePipelineState after endEncoding");
    [pipeline release];
    pipeline = [(PSPipeline *) state retain];
}
- (void)clearBinding:(NSUInteger)index {
    if (index >= PS_MAX_BINDINGS) {
        ps_validation_failure("buffer index outside of the argument table (31 entries)");
    }
    [b[index].buf release];
    free(b[index].bytes);
    memset(&b[index], 0, sizeof(b[index]));
}
- (void)setBytes:(const void *)bytes length:(NSUInteger)length atIndex:(NSUInteger)index {
    ps_encoder_check(ended, "setBytes after endEncoding");
    [self clearBinding:index];
    b[index].bytes = malloc(length ? length : 1);
    memcpy(b[index].bytes, bytes, length);
    b[index].n_bytes = length;
    b[index].set = YES;
}
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index {
    ps_encoder_check(ended, "setBuffer after endEncoding");
    [self clearBinding:index];
    b[index].buf  = [(PSBuffer *) buffer retain];
    b[index].offs = offset;
    b[index].set  = YES;
}
- (void)setBufferOffset:(NSUInteger)offset atIndex:(NSUInteger)index {
    b[index].offs = offset;
}
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index {
    /* the models keep threadgroup memory of their own */
    (void) length; (void) index;
}
- (void)dispatchThreadgroups:(MTLSize)tg threadsPerThreadgroup:(MTLSize)ntg {
    ps_encoder_check(ended, "dispatch after endEncoding");
    if (pipeline == nil) {
        ps_validation_failure("dispatch without a compute pipeline state");
    }
    if (ntg.width*ntg.height*ntg.depth > pipeline.maxTotalThreadsPerThreadgroup) {
        ps_validation_failure("threads per threadgroup above maxTotalThreadsPerThreadgroup");
    }

    /* the argument table as it is now, taken into the command */
    PSPipeline * ppl = [pipeline retain];
    struct ps_binding * tab = calloc(PS_MAX_BINDINGS, sizeof(struct ps_binding));
    int n = 0;
    for (int i = 0; i < PS_MAX_BINDINGS; ++i) {
        tab[i] = b[i];
        [tab[i].buf retain];
        if (b[i].bytes) {
            tab[i].bytes = malloc(b[i].n_bytes ? b[i].n_bytes : 1);
            memcpy(tab[i].bytes, b[i].bytes, b[i].n_bytes);
        }
        if (b[i].set) {
            n = i + 1;
        }
    }
    const MTLSize grid = tg;
    const MTLSize tpg  = ntg;
    const int n_bind = n;

    [cb addCommand:^NSError * {
        struct patchset_replay_binding bufs[PS_MAX_BINDINGS];
        for (int i = 0; i < n_bind; ++i) {
            if (tab[i].bytes) {
                bufs[i].data = tab[i].bytes;
                bufs[i].size = tab[i].n_bytes;
            } else if (tab[i].buf && tab[i].offs <= tab[i].buf->len) {
                bufs[i].data = tab[i].buf->data + tab[i].offs;
                bufs[i].size = tab[i].buf->len - tab[i].offs;
            } else {
                bufs[i].data = NULL;
                bufs[i].size = 0;
            }
        }
        const char * name = [ppl->fn->fname UTF8String];
        const uint32_t g[3] = { (uint32_t) grid.width, (uint32_t) grid.height, (uint32_t) grid.depth };
        const uint16_t t[3] = { (uint16_t) tpg.width, (uint16_t) tpg.height, (uint16_t) tpg.depth };
        struct patchset_replay_effect eff;
        memset(&eff, 0, sizeof(eff));
        const int ran = patchset_replay_run(name, bufs[0].data, bufs[0].size, bufs, n_bind,
                                            ppl->fn->fc, ppl->fn->n_fc, g, t, &eff);
        NSError * e = nil;
        if (ran != 1) {
            e = ps_error(PSCommandBufferErrorDomain, PSCommandBufferErrorInternal,
                         [NSString stringWithFormat:@"the CPU model of %s cannot run this dispatch (%zu bytes of "
                                                    "arguments)", name, bufs[0].size]);
        } else if (eff.n_oob > 0) {
            e = ps_error(PSCommandBufferErrorDomain, PSCommandBufferErrorPageFault,
                         [NSString stringWithFormat:@"%s: %llu access(es) outside of the bound buffers (%llu through "
                                                    "a nil buffer): GPU address fault", name,
                                                    (unsigned long long) eff.n_oob, (unsigned long long) eff.n_nil]);
        }
        return e;
    } cleanup:^{
        for (int i = 0; i < PS_MAX_BINDINGS; ++i) {
            [tab[i].buf release];
            free(tab[i].bytes);
        }
        free(tab);
        [ppl release];
    }];
}
- (void)dispatchThreads:(MTLSize)threads threadsPerThreadgroup:(MTLSize)ntg {
    MTLSize tg = MTLSizeMake((threads.width + ntg.width - 1)/ntg.width, (threads.height + ntg.height - 1)/ntg.height,
                             (threads.depth + ntg.depth - 1)/ntg.depth);
    [self dispatchThreadgroups:tg threadsPerThreadgroup:ntg];
}
- (void)memoryBarrierWithScope:(MTLBarrierScope)scope {
    /* the commands run one after another: every barrier holds */
    (void) scope;
}
- (void)useResource:(id<MTLResource>)resource usage:(MTLResourceUsage)usage { (void) resource; (void) usage; }
- (void)endEncoding {
    ps_encoder_check(ended, "endEncoding twice");
    ended = YES;
}
- (void)insertDebugSignpost:(NSString *)string { (void) string; }
- (void)pushDebugGroup:(NSString *)string { (void) string; }
- (void)popDebugGroup {}
- (void)dealloc {
    for (int i = 0; i < PS_MAX_BINDINGS; ++i) {
        [b[i].buf release];
        free(b[i].bytes);
    }
    [pipeline release];
    [cb release];
    [label release];
    [super dealloc];
}
@end

@implementation PSBlitEncoder
@synthesize label;
- (id<MTLDevice>)device { return cb->dev; }
- (void)copyFromBuffer:(id<MTLBuffer>)src sourceOffset:(NSUInteger)so toBuffer:(id<MTLBuffer>)dst
     destinationOffset:(NSUInteger)dof size:(NSUInteger)size {
    ps_encoder_check(ended, "copy after endEncoding");
    PSBuffer * s = [(PSBuffer *) src retain];
    PSBuffer * d = [(PSBuffer *) dst retain];
    if (s == nil || d == nil || so + size > s->len || dof + size > d->len) {
        ps_validation_failure("copyFromBuffer: a nil buffer or a range outside of a buffer");
    }
    [cb addCommand:^NSError * {
        memmove(d->data + dof, s->data + so, size);
        return nil;
    } cleanup:^{
        [s release];
        [d release];
    }];
}
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value {
    ps_encoder_check(ended, "fill after endEncoding");
    PSBuffer * d = [(PSBuffer *) buffer retain];
    if (d == nil || range.location + range.length > d->len) {
        ps_validation_failure("fillBuffer: a nil buffer or a range outside of the buffer");
    }
    [cb addCommand:^NSError * {
        memset(d->data + range.location, value, range.length);
        return nil;
    } cleanup:^{
        [d release];
    }];
}
- (void)endEncoding {
    ps_encoder_check(ended, "endEncoding twice");
    ended = YES;
}
- (void)insertDebugSignpost:(NSString *)string { (void) string; }
- (void)pushDebugGroup:(NSString *)string { (void) string; }
- (void)popDebugGroup {}
- (void)dealloc {
    [cb release];
    [label release];
    [super dealloc];
}
@end

@implementation PSCommandBuffer
@synthesize label;
- (instancetype)init {
    if ((self = [super init])) {
        commands  = [[NSMutableArray alloc] init];
        completed = [[NSMutableArray alloc] init];
        pthread_mutex_init(&lock, NULL);
        pthread_cond_init(&cond, NULL);
        st = MTLCommandBufferStatusNotEnqueued;
    }
    return self;
}
- (id<MTLDevice>)device { return dev; }
- (id<MTLCommandQueue>)commandQueue { return queue; }
- (MTLCommandBufferStatus)status {
    pthread_mutex_lock(&lock);
    const MTLCommandBufferStatus s = st;
    pthread_mutex_unlock(&lock);
    return s;
}
- (NSError *)error {
    pthread_mutex_lock(&lock);
    NSError * e = [[err retain] autorelease];
    pthread_mutex_unlock(&lock);
    return e;
}
- (void)addCommand:(NSError * (^)(void))run cleanup:(void (^)(void))cleanup {
    if (self.status >= MTLCommandBufferStatusCommitted) {
        ps_validation_failure("encoding into a committed command buffer");
    }
    PSCommand * c = [[PSCommand alloc] init];
    c->run = Block_copy(run);
    c->cleanup = cleanup ? Block_copy(cleanup) : NULL;
    [commands addObject:c];
    [c release];
}
- (void)enqueue {
    pthread_mutex_lock(&lock);
    if (st != MTLCommandBufferStatusNotEnqueued) {
        pthread_mutex_unlock(&lock);
        ps_validation_failure("enqueue of a command buffer already enqueued");
    }
    st = MTLCommandBufferStatusEnqueued;
    pthread_mutex_unlock(&lock);
    [queue enqueueBuffer:self];
}
- (void)commit {
    MTLCommandBufferStatus s = self.status;
    if (s >= MTLCommandBufferStatusCommitted) {
        ps_validation_failure("commit of a command buffer already committed");
    }
    if (s == MTLCommandBufferStatusNotEnqueued) {
        [self enqueue];
    }
    pthread_mutex_lock(&lock);
    st = MTLCommandBufferStatusCommitted;
    pthread_mutex_unlock(&lock);
    [queue kick];
}
- (void)addScheduledHandler:(MTLCommandBufferHandler)block {
    (void) block;
    ps_not_modelled("addScheduledHandler is not provided (the tree does not use it)");
}
- (void)addCompletedHandler:(MTLCommandBufferHandler)block {
    if (self.status >= MTLCommandBufferStatusCommitted) {
        ps_validation_failure("addCompletedHandler after commit");
    }
    MTLCommandBufferHandler c = Block_copy(block);
    [completed addObject:(id) c];
    Block_release(c);
}
- (void)waitUntilScheduled {
    pthread_mutex_lock(&lock);
    if (st < MTLCommandBufferStatusCommitted) {
        pthread_mutex_unlock(&lock);
        ps_validation_failure("waitUntilScheduled on a command buffer not committed");
    }
    while (st < MTLCommandBufferStatusScheduled) {
        pthread_cond_wait(&cond, &lock);
    }
    pthread_mutex_unlock(&lock);
}
- (void)waitUntilCompleted {
    pthread_mutex_lock(&lock);
    if (st < MTLCommandBufferStatusCommitted) {
        pthread_mutex_unlock(&lock);
        ps_validation_failure("waitUntilCompleted on a command buffer not committed");
    }
    /* the final status is set before the handlers run (they read it): wait for the handlers too */
    while (!handled) {
        pthread_cond_wait(&cond, &lock);
    }
    pthread_mutex_unlock(&lock);
}
- (id<MTLBlitCommandEncoder>)blitCommandEncoder {
    PSBlitEncoder * e = [[PSBlitEncoder alloc] init];
    e->cb = [self retain];
    return [e autorelease];
}
- (id<MTLComputeCommandEncoder>)computeCommandEncoder {
    return [self computeCommandEncoderWithDispatchType:MTLDispatchTypeSerial];
}
- (id<MTLComputeCommandEncoder>)computeCommandEncoderWithDispatchType:(MTLDispatchType)dispatchType {
    PSComputeEncoder * e = [[PSComputeEncoder alloc] init];
    e->cb = [self retain];
    e->type = dispatchType;
    return [e autorelease];
}
- (void)encodeWaitForEvent:(id<MTLEvent>)event value:(uint64_t)value {
    PSSharedEvent * ev = [(PSSharedEvent *) event retain];
    [self addCommand:^NSError * {
        [ev waitUntilSignaledValue:value timeoutMS:UINT32_MAX];
        return nil;
    } cleanup:^{
        [ev release];
    }];
}
- (void)encodeSignalEvent:(id<MTLEvent>)event value:(uint64_t)value {
    PSSharedEvent * ev = [(PSSharedEvent *) event retain];
    [self addCommand:^NSError * {
        ev.signaledValue = value;
        return nil;
    } cleanup:^{
        [ev release];
    }];
}
- (void)pushDebugGroup:(NSString *)string { (void) string; }
- (void)popDebugGroup {}
- (void)useResidencySet:(id<MTLResidencySet>)residencySet { (void) residencySet; }
/* on the queue's thread: run the commands, stop at the first error, then the handlers */
- (void)execute {
    pthread_mutex_lock(&lock);
    st = MTLCommandBufferStatusScheduled;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);

    NSError * e = nil;
    @autoreleasepool {
        for (PSCommand * c in commands) {
            e = c->run();
            if (e) {
                [e retain];
                break;
            }
        }
    }

    pthread_mutex_lock(&lock);
    err = e;
    st = e ? MTLCommandBufferStatusError : MTLCommandBufferStatusCompleted;
    pthread_mutex_unlock(&lock);

    for (MTLCommandBufferHandler h in completed) {
        h(self);
    }

    /* waiters return after the handlers have run, as waitUntilCompleted does on Metal */
    pthread_mutex_lock(&lock);
    [commands removeAllObjects];
    handled = YES;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}
- (void)dealloc {
    [commands release];
    [completed release];
    [err release];
    [queue release];
    [dev release];
    [label release];
    pthread_cond_destroy(&cond);
    pthread_mutex_destroy(&lock);
    [super dealloc];
}
@end

static void * ps_queue_main(void * p);

@implementation PSCommandQueue
@synthesize label;
- (instancetype)init {
    if ((self = [super init])) {
        pthread_mutex_init(&lock, NULL);
        pthread_cond_init(&cond, NULL);
        order = [[NSMutableArray alloc] init];
    }
    return self;
}
- (id<MTLDevice>)device { return dev; }
- (id<MTLCommandBuffer>)commandBuffer {
    PSCommandBuffer * cb = [[PSCommandBuffer alloc] init];
    cb->dev = [dev retain];
    cb->queue = [self retain];
    return [cb autorelease];
}
- (id<MTLCommandBuffer>)commandBufferWithUnretainedReferences {
    return [self commandBuffer];
}
- (void)addResidencySet:(id<MTLResidencySet>)residencySet { (void) residencySet; }
- (void)removeResidencySet:(id<MTLResidencySet>)residencySet { (void) residencySet; }
- (void)enqueueBuffer:(PSCommandBuffer *)cb {
    pthread_mutex_lock(&lock);
    [order addObject:cb];
    if (!has_thread) {
        has_thread = YES;
        pthread_create(&thread, NULL, ps_queue_main, self);
    }
    pthread_mutex_unlock(&lock);
}
- (void)kick {
    pthread_mutex_lock(&lock);
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}
/* the queue's thread: runs the command buffer at the head once it is committed */
- (void)drain {
    for (;;) {
        pthread_mutex_lock(&lock);
        while (!stop && (order.count == 0 || [(PSCommandBuffer *) order[0] status] < MTLCommandBufferStatusCommitted)) {
            pthread_cond_wait(&cond, &lock);
        }
        if (stop && order.count == 0) {
            pthread_mutex_unlock(&lock);
            return;
        }
        if (order.count == 0 || [(PSCommandBuffer *) order[0] status] < MTLCommandBufferStatusCommitted) {
            /* stopping with a command buffer enqueued and never committed: it never runs */
            pthread_mutex_unlock(&lock);
            return;
        }
        PSCommandBuffer * cb = [order[0] retain];
        [order removeObjectAtIndex:0];
        pthread_mutex_unlock(&lock);
        [cb execute];
        /* the command buffer may hold the last reference to this queue: then this thread is its last owner, and
           the queue ends here instead of joining its own thread */
        [self retain];
        [cb release];
        if ([self retainCount] == 1) {
            pthread_detach(thread);
            has_thread = NO;
            [self release];
            return;
        }
        [self release];
    }
}
- (void)dealloc {
    if (has_thread) {
        pthread_mutex_lock(&lock);
        stop = YES;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        pthread_join(thread, NULL);
    }
    [order release];
    [dev release];
    [label release];
    pthread_cond_destroy(&cond);
    pthread_mutex_destroy(&lock);
    [super dealloc];
}
@end

static void * ps_queue_main(void * p) {
    @autoreleasepool {
        [(PSCommandQueue *) p drain];
    }
    return NULL;
}

@implementation PSDevice
- (NSString *)name { return @"patchset Metal stand-in (CPU models, not a GPU)"; }
- (uint64_t)registryID { return 1; }
- (MTLDeviceLocation)location { return MTLDeviceLocationBuiltIn; }
- (NSUInteger)maxThreadgroupMemoryLength { return 32768; }
- (NSUInteger)maxBufferLength { return (NSUInteger) 16 << 30; }
- (uint64_t)recommendedMaxWorkingSetSize { return (uint64_t) 16 << 30; }
- (NSUInteger)currentAllocatedSize { return atomic_load(&allocated); }
- (BOOL)hasUnifiedMemory { return YES; }
/* an Apple-silicon GPU of family 8 (the replay's choice too): Apple1..8, Common1..3, Metal3; not Metal4 (no
   tensor API: its kernels have no models) */
- (BOOL)supportsFamily:(MTLGPUFamily)f {
    return (f >= MTLGPUFamilyApple1 && f <= MTLGPUFamilyApple8) || (f >= MTLGPUFamilyCommon1 && f <= MTLGPUFamilyCommon3) ||
        f == MTLGPUFamilyMetal3;
}
- (id<MTLCommandQueue>)newCommandQueue {
    PSCommandQueue * q = [[PSCommandQueue alloc] init];
    q->dev = [self retain];
    return q;
}
- (id<MTLCommandQueue>)newCommandQueueWithMaxCommandBufferCount:(NSUInteger)n {
    (void) n;
    return [self newCommandQueue];
}
- (PSBuffer *)bufferOf:(void *)data length:(NSUInteger)length options:(MTLResourceOptions)options owned:(BOOL)owned {
    PSBuffer * b = [[PSBuffer alloc] init];
    b->dev = [self retain];
    b->data = data;
    b->len = length;
    b->opts = options;
    b->owned = owned;
    atomic_fetch_add(&allocated, length);
    return b;
}
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options {
    if (length == 0) {
        return nil; /* Metal makes no buffer of size 0 */
    }
    void * data = calloc(1, length);
    return data ? [self bufferOf:data length:length options:options owned:YES] : nil;
}
- (id<MTLBuffer>)newBufferWithBytes:(const void *)pointer length:(NSUInteger)length options:(MTLResourceOptions)options {
    PSBuffer * b = (PSBuffer *) [self newBufferWithLength:length options:options];
    if (b) {
        memcpy(b->data, pointer, length);
    }
    return b;
}
- (id<MTLBuffer>)newBufferWithBytesNoCopy:(void *)pointer length:(NSUInteger)length options:(MTLResourceOptions)options
                              deallocator:(void (^)(void * pointer, NSUInteger length))deallocator {
    if (length == 0 || ((uintptr_t) pointer % (uintptr_t) getpagesize()) != 0) {
        return nil; /* Metal: a page-aligned region of non-zero length */
    }
    PSBuffer * b = [self bufferOf:pointer length:length options:options owned:NO];
    b->deallocator = deallocator ? Block_copy(deallocator) : NULL;
    return b;
}
- (id<MTLLibrary>)newDefaultLibrary { return nil; }
- (id<MTLLibrary>)newDefaultLibraryWithBundle:(NSBundle *)bundle error:(NSError **)error {
    (void) bundle;
    if (error) {
        *error = ps_error(PSLibraryErrorDomain, PSLibraryErrorFileNotFound, @"the Metal stand-in loads no metallib");
    }
    return nil;
}
- (id<MTLLibrary>)newLibraryWithURL:(NSURL *)url error:(NSError **)error {
    (void) url;
    return [self newDefaultLibraryWithBundle:nil error:error];
}
- (id<MTLLibrary>)newLibraryWithSource:(NSString *)source options:(MTLCompileOptions *)options error:(NSError **)error {
    (void) options;
    NSArray * names = ps_kernel_names(source);
    if (names.count == 0) {
        if (error) {
            *error = ps_error(PSLibraryErrorDomain, PSLibraryErrorCompileFailure, @"the source defines no kernel");
        }
        return nil;
    }
    ps_no_error(error);
    PSLibrary * lib = [[PSLibrary alloc] init];
    lib->dev = [self retain];
    lib->names = [names retain];
    return lib;
}
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                                             error:(NSError **)error {
    PSFunction * f = (PSFunction *) computeFunction;
    if (!patchset_replay_has_model([f->fname UTF8String])) {
        /* on a Mac every kernel of the library compiles; here only those the CPU models cover run */
        if (error) {
            *error = ps_error(PSLibraryErrorDomain, PSLibraryErrorCompileFailure,
                              [NSString stringWithFormat:@"%@: no CPU model of this kernel (builder/replay/cpp): the "
                                                         "Metal stand-in cannot run it", f->fname]);
        }
        return nil;
    }
    ps_no_error(error);
    PSPipeline * p = [[PSPipeline alloc] init];
    p->dev = [self retain];
    p->fn = [f retain];
    return p;
}
- (id<MTLSharedEvent>)newSharedEvent {
    PSSharedEvent * e = [[PSSharedEvent alloc] init];
    e->dev = [self retain];
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    return e;
}
- (id<MTLResidencySet>)newResidencySetWithDescriptor:(MTLResidencySetDescriptor *)desc error:(NSError **)error {
    ps_no_error(error);
    PSResidencySet * r = [[PSResidencySet alloc] init];
    r->dev = [self retain];
    r->lbl = [desc.label copy];
    r->allocs = [[NSMutableArray alloc] init];
    return r;
}
@end

id<MTLDevice> MTLCreateSystemDefaultDevice(void) {
    static PSDevice * dev = nil;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    void ps_device_init(void);
    pthread_once(&once, ps_device_init);
    extern PSDevice * ps_the_device;
    dev = ps_the_device;
    return [dev retain];
}

PSDevice * ps_the_device = nil;
void ps_device_init(void) {
    ps_the_device = [[PSDevice alloc] init];
}

NSArray<id<MTLDevice>> * MTLCopyAllDevices(void) {
    id<MTLDevice> d = MTLCreateSystemDefaultDevice();
    NSArray * a = [[NSArray alloc] initWithObjects:d, nil];
    [d release];
    return a;
}

//
// Mach's vm_allocate and vm_deallocate (mach/vm_map.h), as the tree's buffers allocate host memory: page-aligned,
// zero-filled
//

kern_return_t vm_allocate(vm_map_t target, vm_address_t * address, vm_size_t size, int flags) {
    (void) target; (void) flags;
    void * p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return 3; /* KERN_NO_SPACE */
    }
    *address = (vm_address_t) p;
    return 0; /* KERN_SUCCESS */
}

kern_return_t vm_deallocate(vm_map_t target, vm_address_t address, vm_size_t size) {
    (void) target;
    return munmap((void *) address, size) == 0 ? 0 : 4; /* KERN_INVALID_ADDRESS */
}

mach_port_t mach_task_self(void) {
    return 0;
}
