"""`patchset toolchain objc --only libobjc2` from the mirror folder (`../shared/third_party`, or
$PATCHSET_OBJC_MIRROR): libobjc2 alone builds into the cache, a program with a root class, object
subscripting and a block compiled for clang's gnustep-2.0 runtime runs on it, and a second run
reuses the toolchain. Where .ci/run built the whole toolchain from the mirror before the tests
($PATCHSET_TEST_OBJC_CACHE), its libobjc2 is the one run and reused, not built again. Needs the apt
packages the recipe names for libobjc2."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import objc_mirror

from builder import proc
from builder.compile import objc_toolchain as ot

RECIPE = ot.load_recipe().upto("libobjc2")
MIRROR = objc_mirror([a.file for a in RECIPE.archives])

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(sys.platform != "linux" or MIRROR is None, reason="no mirror of the archives"),
              pytest.mark.skipif(bool(ot.missing_needs(RECIPE)),
                                 reason=f"libobjc2's build needs the packages {' '.join(RECIPE.packages())}")]

PROGRAM = r"""
#include <objc/runtime.h>
#include <stdio.h>
__attribute__((objc_root_class))
@interface Root { Class isa; }
+ (id)new;
@end
@implementation Root
+ (id)new { return class_createInstance(self, 0); }
@end
@interface Slots : Root { id slots[4]; }
- (id)objectAtIndexedSubscript:(unsigned long)i;
- (void)setObject:(id)o atIndexedSubscript:(unsigned long)i;
@end
@implementation Slots
- (id)objectAtIndexedSubscript:(unsigned long)i { return slots[i]; }
- (void)setObject:(id)o atIndexedSubscript:(unsigned long)i { slots[i] = o; }
@end
int main(void) {
    Slots *s = [Slots new];
    id one = [Root new];
    s[2] = one;
    int (^plus)(int) = ^(int x) { return x + 40; };
    printf("%s %d\n", s[2] == one && s[1] == nil ? "subscripts" : "wrong", plus(2));
    return 0;
}
"""


def test_libobjc2_builds_from_the_mirror_and_runs_a_subscripting_program(tmp_path: Path) -> None:
    assert MIRROR is not None
    cache, recipe = tmp_path / "cache", RECIPE
    if given := os.environ.get("PATCHSET_TEST_OBJC_CACHE"):
        cache, recipe = Path(given), ot.load_recipe()
        prefix = ot.find_built(cache, recipe)  # never built here
        assert prefix is not None, f"PATCHSET_TEST_OBJC_CACHE={given}: no Objective-C toolchain built there"
    else:
        built = ot.build(cache, MIRROR, recipe=recipe, timeout=600)
        assert not built.reused
        prefix = built.prefix
    assert (prefix / "lib" / "libobjc.so").exists()
    src = tmp_path / "t.m"
    src.write_text(PROGRAM)
    exe = tmp_path / "t"
    proc.run(["clang", "-fobjc-runtime=gnustep-2.0", "-fblocks", f"-I{prefix / 'include'}", str(src),
              f"-L{prefix / 'lib'}", f"-Wl,-rpath,{prefix / 'lib'}", "-lobjc", "-o", str(exe)], timeout=120)
    assert proc.run([str(exe)], timeout=30).stdout == "subscripts 42\n"
    again = ot.build(cache, MIRROR, recipe=recipe)
    assert again.reused and again.prefix == prefix and again.seconds < 5
