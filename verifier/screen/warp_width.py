"""Warning tier: HIP code that assumes a 32-lane warp. warpSize is 64 on CDNA (MI300X, MI350X)
and 32 on NVIDIA, so a literal 32 in a shuffle width, a ballot kept in 32 bits, a 0xffffffff
full-warp mask, `lane & 31` or `tid / 32` computes over half a wavefront on AMD: reductions
silently drop lanes, and the kernel passes on an NVIDIA GPU while it is wrong on the target.

Each hit carries its fix (read warpSize, or guard the code). Code in NVIDIA-only preprocessor
branches (`__HIP_PLATFORM_NVIDIA__`, `__CUDA_ARCH__`; platform_guards.py) is fine and not
reported. What it does not catch: a 32 reached through a constant with an unrelated name, or
arithmetic that only equals 32 at run time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from hipevolve.verifier.screen.cxx import Hit
from hipevolve.verifier.screen.platform_guards import nvidia_only_lines
from hipevolve.verifier.screen.registry import check
from hipevolve.verifier.screen.sources import Sources

FIX = "warpSize is 64 on CDNA: read warpSize, or put the 32-lane code under __HIP_PLATFORM_NVIDIA__"
_SHFL = re.compile(r"\b__shfl(?:_xor|_down|_up)?(?P<sync>_sync)?\s*\(")
_FULL_MASK_CALL = re.compile(
    r"\b(?:__shfl(?:_xor|_down|_up)?_sync|__ballot_sync|__any_sync|__all_sync|__match_any_sync"
    r"|__reduce_\w+_sync|__syncwarp)\s*\(\s*(?P<mask>0x[fF]{8}[uU]?)\b(?!\w)"
)
_BALLOT_32 = re.compile(
    r"\b(?:__popc|__ffs|__clz)\s*\(\s*(?:__ballot|__activemask)"
    r"|\b(?:unsigned(?:\s+int)?|uint32_t|int)\s+\w+\s*=\s*(?:__ballot(?:_sync)?|__activemask)\s*\("
)
_LANE_31 = re.compile(
    r"(?<![\w.])(?P<expr>[A-Za-z_][\w.]*)\s*(?:&\s*(?:31|0x1[fF])|%\s*32)\b(?!\.)"
)
_WARP_DIV = re.compile(r"(?<![\w.])(?P<expr>[A-Za-z_][\w.]*)\s*(?:/\s*32|>>\s*5)\b(?!\.)")
_WARP_CONST = re.compile(
    r"(?:#\s*define\s+(?P<macro>\w*(?:WARP|warp|Warp)\w*)\s+32\b"
    r"|\b(?:constexpr|const)\s+\w+(?:\s+\w+)?\s+(?P<name>\w*(?:WARP|warp|Warp)\w*)\s*=\s*32\b)"
)
_HALF_WARP_LOOP = re.compile(
    r"\bfor\s*\([^;]*=\s*16\s*;[^;]*;[^)]*(?:>>=\s*1|/=\s*2)\s*\)(?P<body>[^;]*;)"
)
_THREADISH = re.compile(r"(?:threadIdx\.[xyz]|\b(?:tid|lane|thread|t)\w*)$", re.I)


def _call_args(text: str, start: int) -> list[str]:
    args, depth, begin = [], 0, start
    for i in range(start, min(len(text), start + 400)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return [*args, text[begin:i].strip()]
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[begin:i].strip())
            begin = i + 1
    return args


def _hits(code: str) -> Iterator[tuple[int, str]]:
    for m in _SHFL.finditer(code):
        args = _call_args(code, m.end())
        width_at = 3 if m["sync"] else 2
        if len(args) > width_at and args[width_at] == "32":
            yield m.start(), f"{m[0].rstrip('( ')} with width 32: a shuffle over half a wave"
    for m in _FULL_MASK_CALL.finditer(code):
        yield (
            m.start("mask"),
            f"{m['mask']} as a full-warp mask: a wave has 64 lanes (64-bit masks)",
        )
    for m in _BALLOT_32.finditer(code):
        yield (
            m.start(),
            f"{' '.join(m[0].split())}: a ballot is 64 bits on CDNA (use __popcll, uint64_t)",
        )
    for m in _LANE_31.finditer(code):
        if _THREADISH.search(m["expr"]):
            yield m.start(), f"{' '.join(m[0].split())}: a lane index over 32 lanes"
    for m in _WARP_DIV.finditer(code):
        if _THREADISH.search(m["expr"]):
            yield m.start(), f"{' '.join(m[0].split())}: a warp index for 32-lane warps"
    for m in _WARP_CONST.finditer(code):
        name = m["macro"] or m["name"]
        if "min" not in name.lower():  # a lower bound on the warp width (sizing) is portable
            yield m.start(), f"warp size {name} = 32"
    for m in _HALF_WARP_LOOP.finditer(code):
        if "__shfl" in m["body"]:
            yield m.start(), "a shuffle reduction starting at offset 16 reduces 32 lanes"


@check("warp-32", "warning", formats=("native", "kernelbench"))
def warp_32(s: Sources) -> Iterator[Hit]:
    """Kernels that assume a 32-lane warp (shuffle widths, ballots, masks, `lane & 31`, `/ 32`)
    compute over half a CDNA wavefront; recorded with the fix, except in NVIDIA-only branches."""
    for src in s.cxx:
        dropped = nvidia_only_lines(src.code)
        seen: set[tuple[int, str]] = set()
        for pos, message in sorted(_hits(src.bare)):
            local = src.code.count("\n", 0, pos) + 1
            if local in dropped or (local, message) in seen:
                continue
            seen.add((local, message))
            yield Hit(src.file, src.line(pos), f"{message}; {FIX}")
