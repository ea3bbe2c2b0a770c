"""`patchset toolchain objc --only libobjc2` from the mirror folder (`../shared/third_party`, or
$PATCHSET_OBJC_MIRROR): libobjc2 alone builds into the cache, a program with a root class, object
subscripting and a block compiled for clang's gnustep-2.0 runtime runs on it, and a second run
reuses the toolchain. Needs the apt packages the recipe names for libobjc2."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from builder import proc
from builder.build import objc_toolchain as ot

ROOT = Path(__file__).resolve().parents[1]
MIRRORS = [Path(p) for p in (os.environ.get("PATCHSET_OBJC_MIRROR"),) if p] + [
    ROOT.parent / "shared" / "third_party", ROOT.parent.parent / "shared" / "third_party"]
MIRROR = next((m for m in MIRRORS if (m / "libobjc2-ecef7f1.tar.gz").is_file()), None)
RECIPE = ot.load_recipe().upto("libobjc2")

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
    built = ot.build(tmp_path / "cache", MIRROR, recipe=RECIPE, timeout=600)
    assert not built.reused and (built.prefix / "lib" / "libobjc.so").exists()
    src = tmp_path / "t.m"
    src.write_text(PROGRAM)
    exe = tmp_path / "t"
    proc.run(["clang", "-fobjc-runtime=gnustep-2.0", "-fblocks", f"-I{built.prefix / 'include'}", str(src),
              f"-L{built.prefix / 'lib'}", f"-Wl,-rpath,{built.prefix / 'lib'}", "-lobjc", "-o", str(exe)], timeout=120)
    assert proc.run([str(exe)], timeout=30).stdout == "subscripts 42\n"
    again = ot.build(tmp_path / "cache", MIRROR, recipe=RECIPE)
    assert again.reused and again.prefix == built.prefix and again.seconds < 5
