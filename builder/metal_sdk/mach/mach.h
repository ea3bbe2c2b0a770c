/* patchset Metal SDK stand-in: the Mach virtual-memory calls the tree uses (Apple's
   <mach/mach.h>: mach/kern_return.h, mach/vm_map.h, mach/vm_statistics.h; on macOS Foundation
   brings them in). */
#ifndef PATCHSET_MACH_H
#define PATCHSET_MACH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int kern_return_t;
typedef unsigned int mach_port_t;
typedef mach_port_t vm_map_t;
typedef uintptr_t vm_address_t;
typedef uintptr_t vm_size_t;

#define KERN_SUCCESS 0
#define VM_FLAGS_FIXED 0x0000
#define VM_FLAGS_ANYWHERE 0x0001

mach_port_t mach_task_self(void);
kern_return_t vm_allocate(vm_map_t target_task, vm_address_t * address, vm_size_t size, int flags);
kern_return_t vm_deallocate(vm_map_t target_task, vm_address_t address, vm_size_t size);

#ifdef __cplusplus
}
#endif

#endif
