/* The Metal stand-in's behaviour where docs/backends.md states it (metal-linux): one line per check, "ok NAME" or
   "FAIL NAME: why"; tests/test_integration_metal_linux.py compiles and runs it. */
#import <Foundation/Foundation.h>
#include <Metal/Metal.h>
#include <dispatch/dispatch.h>

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;

static void check(BOOL ok, const char * name, NSString * why) {
    if (ok) {
        printf("ok %s\n", name);
    } else {
        printf("FAIL %s: %s\n", name, why ? [why UTF8String] : "");
        failures++;
    }
}

static void encode_fill(id<MTLCommandBuffer> cb, id<MTLComputePipelineState> ppl, id<MTLBuffer> buf, float v, int n) {
    id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
    [enc setComputePipelineState:ppl];
    [enc setBytes:&v length:sizeof(v) atIndex:0];
    [enc setBuffer:buf offset:0 atIndex:1];
    [enc dispatchThreadgroups:MTLSizeMake(n, 1, 1) threadsPerThreadgroup:MTLSizeMake(1, 1, 1)];
    [enc endEncoding];
}

int main(void) {
    @autoreleasepool {
        id<MTLDevice> dev = MTLCreateSystemDefaultDevice();
        id<MTLCommandQueue> queue = [dev newCommandQueue];

        NSError * error = (NSError *) (void *) 0x1; /* not nil: a successful call must clear it */
        id<MTLLibrary> lib = [dev newLibraryWithSource:@"kernel void kernel_fill(\n) {}\nkernel void kernel_other(\n) {}\n"
                                               options:nil error:&error];
        check(lib != nil && error == nil, "library_from_source", nil);
        check([lib.functionNames containsObject:@"kernel_fill"] && [lib.functionNames containsObject:@"kernel_other"],
              "library_names", [lib.functionNames description]);

        id<MTLFunction> fo = [lib newFunctionWithName:@"kernel_other"];
        id<MTLComputePipelineState> none = [dev newComputePipelineStateWithFunction:fo error:&error];
        check(none == nil && error != nil && [[error localizedDescription] rangeOfString:@"kernel_other"].location != NSNotFound,
              "no_model_no_pipeline", [error localizedDescription]);

        id<MTLFunction> ff = [lib newFunctionWithName:@"kernel_fill"];
        id<MTLComputePipelineState> ppl = [dev newComputePipelineStateWithFunction:ff error:&error];
        check(ppl != nil && error == nil, "pipeline", nil);

        id<MTLBuffer> buf = [dev newBufferWithLength:16*sizeof(float) options:MTLResourceStorageModeShared];

        /* a dispatch runs after commit; handlers in order, before waitUntilCompleted returns */
        id<MTLCommandBuffer> cb = [queue commandBuffer];
        check(cb.status == MTLCommandBufferStatusNotEnqueued, "status_not_enqueued", nil);
        encode_fill(cb, ppl, buf, 2.5f, 16);
        check(((float *) buf.contents)[3] == 0.0f, "nothing_runs_before_commit", nil);
        NSMutableString * order = [NSMutableString string];
        /* a slow first handler: waitUntilCompleted must still return after both, not at the final status */
        [cb addCompletedHandler:^(id<MTLCommandBuffer> b) { usleep(100000); [order appendFormat:@"a%d", (int) b.status]; }];
        [cb addCompletedHandler:^(id<MTLCommandBuffer> b) { (void) b; [order appendString:@"b"]; }];
        [cb commit];
        [cb waitUntilCompleted];
        check(cb.status == MTLCommandBufferStatusCompleted && cb.error == nil, "completed", nil);
        check(((float *) buf.contents)[0] == 2.5f && ((float *) buf.contents)[15] == 2.5f, "dispatch_ran", nil);
        check([order isEqualToString:@"a4b"], "handlers_in_order_after_final_status", order);

        /* an access through a nil binding: not performed, the command buffer fails with a page fault and stops */
        id<MTLBuffer> other = [dev newBufferWithLength:4*sizeof(float) options:MTLResourceStorageModeShared];
        cb = [queue commandBuffer];
        encode_fill(cb, ppl, nil, 1.0f, 4);
        encode_fill(cb, ppl, other, 7.0f, 4);
        [cb commit];
        [cb waitUntilCompleted];
        check(cb.status == MTLCommandBufferStatusError && cb.error.code == 3, "nil_access_page_fault",
              [cb.error description]);
        check(((float *) other.contents)[0] == 0.0f, "error_stops_the_command_buffer", nil);

        /* an access outside of the bound buffer: the same */
        cb = [queue commandBuffer];
        encode_fill(cb, ppl, other, 1.0f, 5);
        [cb commit];
        [cb waitUntilCompleted];
        check(cb.status == MTLCommandBufferStatusError && cb.error.code == 3, "out_of_bounds_page_fault", nil);

        /* enqueue order: a command buffer enqueued and not committed holds up the one behind it */
        id<MTLCommandBuffer> first = [queue commandBuffer];
        id<MTLCommandBuffer> second = [queue commandBuffer];
        [first enqueue];
        check(first.status == MTLCommandBufferStatusEnqueued, "status_enqueued", nil);
        NSMutableString * ran = [NSMutableString string];
        [first addCompletedHandler:^(id<MTLCommandBuffer> b) { (void) b; @synchronized (ran) { [ran appendString:@"1"]; } }];
        [second addCompletedHandler:^(id<MTLCommandBuffer> b) { (void) b; @synchronized (ran) { [ran appendString:@"2"]; } }];
        encode_fill(second, ppl, other, 3.0f, 4);
        [second commit];
        usleep(50000);
        check(second.status == MTLCommandBufferStatusCommitted, "held_up_by_an_uncommitted_one", nil);
        [first commit];
        [second waitUntilCompleted];
        check([ran isEqualToString:@"12"] && first.status == MTLCommandBufferStatusCompleted, "enqueue_order", ran);

        /* a queue and a command buffer released while it runs: the queue's own thread ends up owning them last */
        for (int i = 0; i < 20; ++i) {
            @autoreleasepool {
                id<MTLCommandQueue> q2 = [dev newCommandQueue];
                id<MTLCommandBuffer> c2 = [q2 commandBuffer];
                encode_fill(c2, ppl, other, 5.0f, 4);
                [c2 commit];
                [q2 release];
            }
        }
        usleep(100000);
        check(((float *) other.contents)[0] == 5.0f, "queue_released_while_running", nil);

        /* a residency set takes a nil allocation without raising, and clears the error */
        if (@available(macOS 15.0, *)) {
            MTLResidencySetDescriptor * desc = [[MTLResidencySetDescriptor alloc] init];
            error = (NSError *) (void *) 0x1;
            id<MTLResidencySet> rset = [dev newResidencySetWithDescriptor:desc error:&error];
            check(rset != nil && error == nil, "residency_set_clears_error", nil);
            [rset addAllocation:(id<MTLAllocation>) nil];
            [rset addAllocation:buf];
            check(rset.allocationCount == 1, "residency_set_ignores_nil", nil);
            [rset release];
            [desc release];
        }

        /* libdispatch: dispatch_apply on a concurrent queue, groups, semaphores with a time-out */
        dispatch_queue_t q = dispatch_queue_create("t", DISPATCH_QUEUE_CONCURRENT);
        __block atomic_long sum = 0;
        dispatch_apply(1000, q, ^(size_t i) { atomic_fetch_add(&sum, (long) i); });
        check(atomic_load(&sum) == 499500, "dispatch_apply", nil);
        dispatch_group_t g = dispatch_group_create();
        __block atomic_int done = 0;
        for (int i = 0; i < 8; ++i) {
            dispatch_group_async(g, dispatch_get_global_queue(0, 0), ^{ usleep(1000); atomic_fetch_add(&done, 1); });
        }
        check(dispatch_group_wait(g, DISPATCH_TIME_FOREVER) == 0 && atomic_load(&done) == 8, "group", nil);
        dispatch_semaphore_t s = dispatch_semaphore_create(0);
        check(dispatch_semaphore_wait(s, dispatch_time(DISPATCH_TIME_NOW, 10*NSEC_PER_MSEC)) != 0, "semaphore_timeout", nil);
        dispatch_semaphore_signal(s);
        check(dispatch_semaphore_wait(s, DISPATCH_TIME_FOREVER) == 0, "semaphore_signal", nil);
        dispatch_release(s);
        dispatch_release(g);
        dispatch_release(q);

        [buf release];
        [other release];
        [ppl release];
        [ff release];
        [fo release];
        [lib release];
        [queue release];
        [dev release];
    }
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
