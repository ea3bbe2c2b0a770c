/* patchset Metal SDK stand-in: GNUstep's Foundation includes <objc/blocks_runtime.h>, which
   libobjc2 ships and gcc's libobjc does not; the BlocksRuntime package's <Block.h> declares
   the same functions (_Block_copy, _Block_release). */
#include <Block.h>
