"""Read the dispatch trace of the host-side Metal replay (builder/replay/cpp, docs/backends.md).

With `GGML_METAL_REPLAY_TRACE=FILE`, the replay appends one JSON object per dispatch it encoded: the node
being encoded, the kernel and pipeline, the grid (threadgroups and threads per threadgroup), the bound
buffers, and what the kernel's CPU model did (threads run, elements written, elements the arguments
describe, the lowest and highest column written, accesses outside of the bound buffers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from builder.errors import TestRunError


@dataclass(frozen=True)
class Dispatch:
    compute: int
    op: str
    node: str
    node_ne: tuple[int, ...]
    kernel: str
    grid: tuple[int, int, int]
    threads: tuple[int, int, int]
    max_threads: int
    nil: bool
    modelled: bool
    ran: bool
    writes: int
    expect: int
    oob: int
    cols: tuple[int, int]
    row_len: int

    @property
    def short(self) -> bool:
        """The model ran and wrote fewer elements than the kernel's arguments say the dispatch covers."""
        return self.ran and self.expect > 0 and self.writes < self.expect

    def describe(self) -> str:
        g, t = "x".join(map(str, self.grid)), "x".join(map(str, self.threads))
        ne = ",".join(map(str, self.node_ne))
        what = f"compute {self.compute} {self.op or '?'} '{self.node}' [{ne}]: {self.kernel} grid {g} of {t} threads"
        if self.nil and not self.ran:
            return f"{what}: a failed buffer lookup is bound (not run)"
        if self.nil:
            return f"{what}: read or wrote through a nil buffer (not performed)"
        if not self.ran:
            return f"{what}: not run ({'no CPU model' if not self.modelled else 'the model rejected it'})"
        text = f"{what} wrote {self.writes} of {self.expect} elements"
        if self.row_len and self.cols[1] >= 0:
            text += f" (columns {self.cols[0]}..{self.cols[1]} of {self.row_len}-wide rows)"
        if self.short:
            text += f": {self.expect - self.writes} left stale"
        if self.oob:
            text += f"; {self.oob} access(es) outside of the bound buffers"
        return text


def read_trace(path: Path) -> list[Dispatch]:
    """The dispatches of a trace file, in encoding order."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            out.append(Dispatch(
                int(d["compute"]), str(d["op"]), str(d["node"]), tuple(int(x) for x in d["node_ne"]), str(d["kernel"]),
                (int(d["grid"][0]), int(d["grid"][1]), int(d["grid"][2])),
                (int(d["threads"][0]), int(d["threads"][1]), int(d["threads"][2])),
                int(d["max_threads"]), bool(d["nil"]), bool(d["modelled"]), bool(d["ran"]), int(d["writes"]),
                int(d["expect"]), int(d["oob"]), (int(d["cols"][0]), int(d["cols"][1])), int(d["row_len"])))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise TestRunError(f"{path}:{n}: not a dispatch record of the Metal replay ({e})") from e
    return out


def trace_notes(path: Path, limit: int = 20) -> tuple[str, ...]:
    """A summary line, then the dispatches that left part of their destination unwritten, ran into a nil
    buffer, were not run, or accessed memory outside of their buffers."""
    dispatches = read_trace(path)
    odd = [d for d in dispatches if d.short or d.nil or not d.ran or d.oob]
    kernels = sorted({d.kernel for d in dispatches})
    head = (f"metal replay: {len(dispatches)} dispatch(es) of {len(kernels)} kernel(s) replayed on the CPU; "
            f"{sum(d.short for d in dispatches)} wrote fewer elements than their arguments describe")
    lines = [head, *(d.describe() for d in odd[:limit])]
    if len(odd) > limit:
        lines.append(f"... and {len(odd) - limit} more (trace: {path})")
    return tuple(lines)
