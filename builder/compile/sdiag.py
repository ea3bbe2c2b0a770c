"""Clang's serialized diagnostics (`--serialize-diagnostics FILE`), read into records.

The structured form of its errors in clang 14, which has no SARIF or JSON output
(`-fdiagnostics-format=sarif` came in 15).

The file is an LLVM bitstream (magic `DIAG`) whose layout is clang's
`include/clang/Frontend/SerializedDiagnostics.h`: a META block, then one DIAG block per
diagnostic, each holding a RECORD_DIAG (severity, file id, line, column, offset, category, flag,
message) and RECORD_FILENAME records that name the file ids. Notes are DIAG blocks nested in their
diagnostic's block. The reader below implements the generic bitstream rules (LLVM's
`docs/BitCodeFormat.rst`): abbreviations, the BLOCKINFO block, fixed, VBR, char6, array and blob
operands.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.errors import BuildError

_MAGIC = b"DIAG"
_BLOCKINFO = 0
_BLOCK_DIAG = 9
_RECORD_DIAG = 2
_RECORD_FILENAME = 6
_SEVERITY = {0: "ignored", 1: "note", 2: "warning", 3: "error", 4: "fatal", 5: "remark"}
_CHAR6 = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._"


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic of a compile, where the compiler put it."""

    severity: str
    """note, warning, error or fatal."""
    file: str
    line: int
    column: int
    message: str

    @property
    def is_error(self) -> bool:
        return self.severity in ("error", "fatal")

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.severity}: {self.message}"


class _Bits:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0  # in bits

    def at_end(self) -> bool:
        return self.pos >= len(self.data) * 8

    def fixed(self, width: int) -> int:
        value = 0
        for i in range(width):
            byte = self.data[(self.pos + i) >> 3]
            value |= ((byte >> ((self.pos + i) & 7)) & 1) << i
        self.pos += width
        return value

    def vbr(self, width: int) -> int:
        hi = 1 << (width - 1)
        value, shift = 0, 0
        while True:
            chunk = self.fixed(width)
            value |= (chunk & (hi - 1)) << shift
            shift += width - 1
            if not chunk & hi:
                return value

    def align32(self) -> None:
        self.pos = (self.pos + 31) & ~31


# an abbreviation operand: (kind, value); kinds: literal, fixed, vbr, array, char6, blob
_Op = tuple[str, int]


def _read_abbrev(b: _Bits) -> list[_Op]:
    ops: list[_Op] = []
    n = b.vbr(5)
    i = 0
    while i < n:
        if b.fixed(1):
            ops.append(("literal", b.vbr(8)))
        else:
            enc = b.fixed(3)
            if enc in (1, 2):
                ops.append(("fixed" if enc == 1 else "vbr", b.vbr(5)))
            elif enc in (3, 4, 5):
                ops.append(({3: "array", 4: "char6", 5: "blob"}[enc], 0))
            else:
                raise ValueError(f"unknown operand encoding {enc}")
        i += 1
    return ops


def _scalar(b: _Bits, op: _Op) -> int:
    kind, v = op
    if kind == "literal":
        return v
    if kind == "fixed":
        return b.fixed(v)
    if kind == "vbr":
        return b.vbr(v)
    if kind == "char6":
        return ord(_CHAR6[b.fixed(6)])
    raise ValueError(f"operand {kind} is not a scalar")


def _read_abbreviated(b: _Bits, ops: list[_Op]) -> tuple[int, list[int], bytes | None]:
    values: list[int] = []
    blob: bytes | None = None
    i = 0
    while i < len(ops):
        kind = ops[i][0]
        if kind == "array":
            n = b.vbr(6)
            elem = ops[i + 1]
            values += [_scalar(b, elem) for _ in range(n)]
            i += 2
            continue
        if kind == "blob":
            n = b.vbr(6)
            b.align32()
            start = b.pos >> 3
            blob = b.data[start:start + n]
            b.pos += n * 8
            b.align32()
        else:
            values.append(_scalar(b, ops[i]))
        i += 1
    return values[0], values[1:], blob


def read(path: Path) -> list[Diagnostic]:
    """Every diagnostic in a serialized-diagnostics file, in the order the compiler emitted them."""
    data = path.read_bytes()
    if not data.startswith(_MAGIC):
        raise BuildError(f"{path}: not a clang serialized-diagnostics file")
    try:
        return _parse(data)
    except (IndexError, ValueError, KeyError) as e:
        raise BuildError(f"{path}: damaged serialized diagnostics ({e})") from None


def _parse(data: bytes) -> list[Diagnostic]:
    b = _Bits(data)
    b.pos = 32
    blockinfo: dict[int, list[list[_Op]]] = {}
    files: dict[int, str] = {}
    raw: list[tuple[int, int, int, int, str]] = []
    # the stack of open blocks: (block id, abbreviation width, abbreviations)
    stack: list[tuple[int, int, list[list[_Op]]]] = [(-1, 2, [])]
    info_target = -1
    while not b.at_end():
        block_id, width, abbrevs = stack[-1]
        if len(stack) == 1 and len(data) * 8 - b.pos < 32:
            break  # padding after the last top-level block
        code = b.fixed(width)
        if code == 0:  # END_BLOCK
            b.align32()
            stack.pop()
            if not stack:
                break
            continue
        if code == 1:  # ENTER_SUBBLOCK
            new_id = b.vbr(8)
            new_width = b.vbr(4)
            b.align32()
            b.fixed(32)  # the block's length in words
            stack.append((new_id, new_width, list(blockinfo.get(new_id, []))))
            continue
        if code == 2:  # DEFINE_ABBREV
            ops = _read_abbrev(b)
            if block_id == _BLOCKINFO:
                blockinfo.setdefault(info_target, []).append(ops)
            else:
                abbrevs.append(ops)
            continue
        if code == 3:  # UNABBREV_RECORD
            rec = b.vbr(6)
            values = [b.vbr(6) for _ in range(b.vbr(6))]
            blob = None
        else:
            rec, values, blob = _read_abbreviated(b, abbrevs[code - 4])
        if block_id == _BLOCKINFO:
            if rec == 1:  # SETBID
                info_target = values[0]
            continue
        text = blob.decode("utf-8", "replace") if blob is not None else ""
        if rec == _RECORD_FILENAME:
            # [file id, size, modification time, name length] + name
            files[values[0]] = text
        elif rec == _RECORD_DIAG and block_id == _BLOCK_DIAG:
            # [severity, file id, line, column, offset, category, flag id, message length] + message
            raw.append((values[0], values[1], values[2], values[3], text))
    # a file is named once, before its first use; resolved at the end all the same
    return [Diagnostic(_SEVERITY.get(sev, str(sev)), files.get(fid, ""), line, col, text)
            for sev, fid, line, col, text in raw]
