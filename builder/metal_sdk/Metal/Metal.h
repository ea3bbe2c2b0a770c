/* patchset Metal SDK stand-in: declarations of the Metal API that the tree's Objective-C host code
   (the .m files of ggml/src/ggml-metal) uses, so that it can be compiled (-fsyntax-only) on Linux against
   GNUstep's Foundation. Nothing here runs. Signatures and values: Apple's Metal framework headers
   (the file named above each group), as listed in Apple's metal-cpp C++ wrapper and Apple's
   documentation; README.md says how to add one. */
#ifndef PATCHSET_METAL_H
#define PATCHSET_METAL_H

#import <Foundation/Foundation.h>
#include <TargetConditionals.h>
#include <Availability.h>
#include <dispatch/dispatch.h>
/* on macOS these come with Foundation's own includes */
#include <mach/mach.h>
#include <unistd.h>
#import <patchset/foundation_extras.h>

/* Availability.h's API_AVAILABLE(macos(15.0)): the check compiles for macOS at the tree's deployment
   target with -Werror=unguarded-availability-new, so a use outside @available fails as on macOS */
#define PATCHSET_MACOS(version) __attribute__((availability(macos, introduced = version)))

#ifndef NS_ENUM
#define NS_ENUM(type, name) enum name : type name; enum name : type
#endif
#ifndef NS_OPTIONS
#define NS_OPTIONS(type, name) enum name : type name; enum name : type
#endif

@protocol MTLDevice;
@protocol MTLCommandQueue;
@protocol MTLCommandBuffer;
@protocol MTLBuffer;
@protocol MTLFunction;
@protocol MTLLibrary;
@protocol MTLComputePipelineState;
@protocol MTLResidencySet;
@protocol MTLSharedEvent;
@protocol MTLEvent;

/* MTLTypes.h */
typedef struct {
    NSUInteger width;
    NSUInteger height;
    NSUInteger depth;
} MTLSize;

static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
    MTLSize size = { width, height, depth };
    return size;
}

/* MTLResource.h */
typedef NS_ENUM(NSUInteger, MTLStorageMode) {
    MTLStorageModeShared = 0,
    MTLStorageModeManaged = 1,
    MTLStorageModePrivate = 2,
    MTLStorageModeMemoryless = 3,
};

typedef NS_ENUM(NSUInteger, MTLCPUCacheMode) {
    MTLCPUCacheModeDefaultCache = 0,
    MTLCPUCacheModeWriteCombined = 1,
};

typedef NS_ENUM(NSUInteger, MTLHazardTrackingMode) {
    MTLHazardTrackingModeDefault = 0,
    MTLHazardTrackingModeUntracked = 1,
    MTLHazardTrackingModeTracked = 2,
};

#define MTLResourceCPUCacheModeShift 0
#define MTLResourceStorageModeShift 4
#define MTLResourceHazardTrackingModeShift 8

typedef NS_OPTIONS(NSUInteger, MTLResourceOptions) {
    MTLResourceCPUCacheModeDefaultCache = MTLCPUCacheModeDefaultCache << MTLResourceCPUCacheModeShift,
    MTLResourceCPUCacheModeWriteCombined = MTLCPUCacheModeWriteCombined << MTLResourceCPUCacheModeShift,
    MTLResourceStorageModeShared = MTLStorageModeShared << MTLResourceStorageModeShift,
    MTLResourceStorageModeManaged = MTLStorageModeManaged << MTLResourceStorageModeShift,
    MTLResourceStorageModePrivate = MTLStorageModePrivate << MTLResourceStorageModeShift,
    MTLResourceStorageModeMemoryless = MTLStorageModeMemoryless << MTLResourceStorageModeShift,
    MTLResourceHazardTrackingModeDefault = MTLHazardTrackingModeDefault << MTLResourceHazardTrackingModeShift,
    MTLResourceHazardTrackingModeUntracked = MTLHazardTrackingModeUntracked << MTLResourceHazardTrackingModeShift,
    MTLResourceHazardTrackingModeTracked = MTLHazardTrackingModeTracked << MTLResourceHazardTrackingModeShift,
};

/* MTLAllocation.h (macOS 15) */
PATCHSET_MACOS(15.0)
@protocol MTLAllocation <NSObject>
@property (readonly) NSUInteger allocatedSize;
@end

@protocol MTLResource <MTLAllocation>
@property (copy, atomic) NSString * label;
@property (readonly) id<MTLDevice> device;
@property (readonly) MTLStorageMode storageMode;
@property (readonly) MTLResourceOptions resourceOptions;
@end

/* MTLBuffer.h */
@protocol MTLBuffer <MTLResource>
@property (readonly) NSUInteger length;
- (void *)contents;
- (void)didModifyRange:(NSRange)range;
@property (readonly) uint64_t gpuAddress;
@end

/* MTLArgument.h (MTLDataType.h since macOS 26) */
typedef NS_ENUM(NSUInteger, MTLDataType) {
    MTLDataTypeNone = 0,
    MTLDataTypeFloat = 3,
    MTLDataTypeHalf = 16,
    MTLDataTypeInt = 29,
    MTLDataTypeUInt = 33,
    MTLDataTypeShort = 37,
    MTLDataTypeUShort = 41,
    MTLDataTypeChar = 45,
    MTLDataTypeUChar = 49,
    MTLDataTypeBool = 53,
};

/* MTLFunctionConstantValues.h */
@interface MTLFunctionConstantValues : NSObject
- (void)setConstantValue:(const void *)value type:(MTLDataType)type atIndex:(NSUInteger)index;
- (void)setConstantValues:(const void *)values type:(MTLDataType)type withRange:(NSRange)range;
- (void)setConstantValue:(const void *)value type:(MTLDataType)type withName:(NSString *)name;
- (void)reset;
@end

/* MTLLibrary.h */
typedef NS_ENUM(NSUInteger, MTLLanguageVersion) {
    MTLLanguageVersion1_1 = (1 << 16) + 1,
    MTLLanguageVersion1_2 = (1 << 16) + 2,
    MTLLanguageVersion2_0 = (2 << 16),
    MTLLanguageVersion2_1 = (2 << 16) + 1,
    MTLLanguageVersion2_2 = (2 << 16) + 2,
    MTLLanguageVersion2_3 = (2 << 16) + 3,
    MTLLanguageVersion2_4 = (2 << 16) + 4,
    MTLLanguageVersion3_0 = (3 << 16) + 0,
    MTLLanguageVersion3_1 = (3 << 16) + 1,
    MTLLanguageVersion3_2 = (3 << 16) + 2,
    MTLLanguageVersion4_0 = (4 << 16) + 0,
};

typedef NS_ENUM(NSInteger, MTLMathMode) {
    MTLMathModeSafe = 0,
    MTLMathModeRelaxed = 1,
    MTLMathModeFast = 2,
};

@interface MTLCompileOptions : NSObject <NSCopying>
@property (copy) NSDictionary<NSString *, NSObject *> * preprocessorMacros;
@property (readwrite) BOOL fastMathEnabled;
@property (readwrite) MTLMathMode mathMode;
@property (readwrite) MTLLanguageVersion languageVersion;
@end

@protocol MTLFunction <NSObject>
@property (copy) NSString * label;
@property (readonly) id<MTLDevice> device;
@property (readonly) NSString * name;
@end

@protocol MTLLibrary <NSObject>
@property (copy) NSString * label;
@property (readonly) id<MTLDevice> device;
@property (readonly) NSArray<NSString *> * functionNames;
- (id<MTLFunction>)newFunctionWithName:(NSString *)functionName;
- (id<MTLFunction>)newFunctionWithName:(NSString *)name constantValues:(MTLFunctionConstantValues *)constantValues
                                 error:(NSError **)error;
@end

/* MTLComputePipeline.h */
@protocol MTLComputePipelineState <NSObject>
@property (readonly) NSString * label;
@property (readonly) id<MTLDevice> device;
@property (readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property (readonly) NSUInteger threadExecutionWidth;
@property (readonly) NSUInteger staticThreadgroupMemoryLength;
@end

/* MTLCommandEncoder.h */
typedef NS_OPTIONS(NSUInteger, MTLBarrierScope) {
    MTLBarrierScopeBuffers = 1 << 0,
    MTLBarrierScopeTextures = 1 << 1,
    MTLBarrierScopeRenderTargets = 1 << 2,
};

typedef NS_OPTIONS(NSUInteger, MTLResourceUsage) {
    MTLResourceUsageRead = 1 << 0,
    MTLResourceUsageWrite = 1 << 1,
};

@protocol MTLCommandEncoder <NSObject>
@property (readonly) id<MTLDevice> device;
@property (copy, atomic) NSString * label;
- (void)endEncoding;
- (void)insertDebugSignpost:(NSString *)string;
- (void)pushDebugGroup:(NSString *)string;
- (void)popDebugGroup;
@end

/* MTLComputeCommandEncoder.h, MTLCommandBuffer.h (MTLDispatchType) */
typedef NS_ENUM(NSUInteger, MTLDispatchType) {
    MTLDispatchTypeSerial = 0,
    MTLDispatchTypeConcurrent = 1,
};

@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
@property (readonly) MTLDispatchType dispatchType;
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBytes:(const void *)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setBufferOffset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)dispatchThreads:(MTLSize)threadsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)memoryBarrierWithScope:(MTLBarrierScope)scope;
- (void)useResource:(id<MTLResource>)resource usage:(MTLResourceUsage)usage;
@end

/* MTLBlitCommandEncoder.h */
@protocol MTLBlitCommandEncoder <MTLCommandEncoder>
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size;
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value;
@end

/* MTLEvent.h */
@protocol MTLEvent <NSObject>
@property (readonly) id<MTLDevice> device;
@property (copy, atomic) NSString * label;
@end

@protocol MTLSharedEvent <MTLEvent>
@property (readwrite) uint64_t signaledValue;
- (BOOL)waitUntilSignaledValue:(uint64_t)value timeoutMS:(uint64_t)milliseconds;
@end

/* MTLResidencySet.h (macOS 15) */
PATCHSET_MACOS(15.0)
@interface MTLResidencySetDescriptor : NSObject <NSCopying>
@property (copy, atomic) NSString * label;
@property (readwrite) NSUInteger initialCapacity;
@end

PATCHSET_MACOS(15.0)
@protocol MTLResidencySet <NSObject>
@property (readonly) id<MTLDevice> device;
@property (readonly) NSString * label;
@property (readonly) uint64_t allocatedSize;
@property (readonly) NSArray<id<MTLAllocation>> * allAllocations;
@property (readonly) NSUInteger allocationCount;
- (void)requestResidency;
- (void)endResidency;
- (void)addAllocation:(id<MTLAllocation>)allocation;
- (void)removeAllocation:(id<MTLAllocation>)allocation;
- (void)removeAllAllocations;
- (BOOL)containsAllocation:(id<MTLAllocation>)anAllocation;
- (void)commit;
@end

/* MTLCommandBuffer.h */
typedef NS_ENUM(NSUInteger, MTLCommandBufferStatus) {
    MTLCommandBufferStatusNotEnqueued = 0,
    MTLCommandBufferStatusEnqueued = 1,
    MTLCommandBufferStatusCommitted = 2,
    MTLCommandBufferStatusScheduled = 3,
    MTLCommandBufferStatusCompleted = 4,
    MTLCommandBufferStatusError = 5,
};

typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer>);

@protocol MTLCommandBuffer <NSObject>
@property (readonly) id<MTLDevice> device;
@property (readonly) id<MTLCommandQueue> commandQueue;
@property (copy, atomic) NSString * label;
@property (readonly) MTLCommandBufferStatus status;
@property (readonly) NSError * error;
- (void)enqueue;
- (void)commit;
- (void)addScheduledHandler:(MTLCommandBufferHandler)block;
- (void)addCompletedHandler:(MTLCommandBufferHandler)block;
- (void)waitUntilScheduled;
- (void)waitUntilCompleted;
- (id<MTLBlitCommandEncoder>)blitCommandEncoder;
- (id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (id<MTLComputeCommandEncoder>)computeCommandEncoderWithDispatchType:(MTLDispatchType)dispatchType;
- (void)encodeWaitForEvent:(id<MTLEvent>)event value:(uint64_t)value;
- (void)encodeSignalEvent:(id<MTLEvent>)event value:(uint64_t)value;
- (void)pushDebugGroup:(NSString *)string;
- (void)popDebugGroup;
- (void)useResidencySet:(id<MTLResidencySet>)residencySet PATCHSET_MACOS(15.0);
@end

/* MTLCommandQueue.h */
@protocol MTLCommandQueue <NSObject>
@property (copy, atomic) NSString * label;
@property (readonly) id<MTLDevice> device;
- (id<MTLCommandBuffer>)commandBuffer;
- (id<MTLCommandBuffer>)commandBufferWithUnretainedReferences;
- (void)addResidencySet:(id<MTLResidencySet>)residencySet PATCHSET_MACOS(15.0);
- (void)removeResidencySet:(id<MTLResidencySet>)residencySet PATCHSET_MACOS(15.0);
@end

/* MTLDevice.h */
typedef NS_ENUM(NSInteger, MTLGPUFamily) {
    MTLGPUFamilyApple1 = 1001,
    MTLGPUFamilyApple2 = 1002,
    MTLGPUFamilyApple3 = 1003,
    MTLGPUFamilyApple4 = 1004,
    MTLGPUFamilyApple5 = 1005,
    MTLGPUFamilyApple6 = 1006,
    MTLGPUFamilyApple7 = 1007,
    MTLGPUFamilyApple8 = 1008,
    MTLGPUFamilyApple9 = 1009,
    MTLGPUFamilyApple10 = 1010,
    MTLGPUFamilyMac1 = 2001,
    MTLGPUFamilyMac2 = 2002,
    MTLGPUFamilyCommon1 = 3001,
    MTLGPUFamilyCommon2 = 3002,
    MTLGPUFamilyCommon3 = 3003,
    MTLGPUFamilyMacCatalyst1 = 4001,
    MTLGPUFamilyMacCatalyst2 = 4002,
    MTLGPUFamilyMetal3 = 5001,
    MTLGPUFamilyMetal4 = 5002,
};

typedef NS_ENUM(NSUInteger, MTLDeviceLocation) {
    MTLDeviceLocationBuiltIn = 0,
    MTLDeviceLocationSlot = 1,
    MTLDeviceLocationExternal = 2,
    MTLDeviceLocationUnspecified = NSUIntegerMax,
};

@protocol MTLDevice <NSObject>
@property (readonly) NSString * name;
@property (readonly) uint64_t registryID;
@property (readonly) MTLDeviceLocation location;
@property (readonly) NSUInteger maxThreadgroupMemoryLength;
@property (readonly) NSUInteger maxBufferLength;
@property (readonly) uint64_t recommendedMaxWorkingSetSize;
@property (readonly) NSUInteger currentAllocatedSize;
@property (readonly) BOOL hasUnifiedMemory;
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily;
- (id<MTLCommandQueue>)newCommandQueue;
- (id<MTLCommandQueue>)newCommandQueueWithMaxCommandBufferCount:(NSUInteger)maxCommandBufferCount;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytes:(const void *)pointer length:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytesNoCopy:(void *)pointer length:(NSUInteger)length
                                  options:(MTLResourceOptions)options
                              deallocator:(void (^)(void * pointer, NSUInteger length))deallocator;
- (id<MTLLibrary>)newDefaultLibrary;
- (id<MTLLibrary>)newDefaultLibraryWithBundle:(NSBundle *)bundle error:(NSError **)error;
- (id<MTLLibrary>)newLibraryWithURL:(NSURL *)url error:(NSError **)error;
- (id<MTLLibrary>)newLibraryWithSource:(NSString *)source options:(MTLCompileOptions *)options
                                 error:(NSError **)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                                             error:(NSError **)error;
- (id<MTLSharedEvent>)newSharedEvent;
- (id<MTLResidencySet>)newResidencySetWithDescriptor:(MTLResidencySetDescriptor *)desc error:(NSError **)error
    PATCHSET_MACOS(15.0);
@end

#ifdef __cplusplus
extern "C" {
#endif
id<MTLDevice> MTLCreateSystemDefaultDevice(void);
NSArray<id<MTLDevice>> * MTLCopyAllDevices(void);
#ifdef __cplusplus
}
#endif

/* MTLCaptureScope.h, MTLCaptureManager.h */
@protocol MTLCaptureScope <NSObject>
@property (readonly) id<MTLDevice> device;
@property (copy, atomic) NSString * label;
@property (readonly) id<MTLCommandQueue> commandQueue;
- (void)beginScope;
- (void)endScope;
@end

typedef NS_ENUM(NSInteger, MTLCaptureDestination) {
    MTLCaptureDestinationDeveloperTools = 1,
    MTLCaptureDestinationGPUTraceDocument = 2,
};

@interface MTLCaptureDescriptor : NSObject <NSCopying>
@property (retain) id captureObject;
@property (assign) MTLCaptureDestination destination;
@property (copy) NSURL * outputURL;
@end

@interface MTLCaptureManager : NSObject
+ (MTLCaptureManager *)sharedCaptureManager;
- (id<MTLCaptureScope>)newCaptureScopeWithDevice:(id<MTLDevice>)device;
- (id<MTLCaptureScope>)newCaptureScopeWithCommandQueue:(id<MTLCommandQueue>)commandQueue;
- (BOOL)supportsDestination:(MTLCaptureDestination)destination;
- (BOOL)startCaptureWithDescriptor:(MTLCaptureDescriptor *)descriptor error:(NSError **)error;
- (void)stopCapture;
@property (readonly) BOOL isCapturing;
@end

#endif
