"""What the compilers made of a kernel: the PTX and SASS of CUDA C++ (a `%%cuda` cell or a source string) and of a
Triton kernel compiled ahead of time, and the few facts the lessons read in them.

None of it needs a GPU: nvcc compiles for any architecture (`sm_90a` by default here, the reference GPU's), and the
tools that read the binaries, `cuobjdump` and `nvdisasm`, come with the CUDA toolkit beside nvcc, or with Triton's
wheel (triton/backends/nvidia/bin), which is where `find` looks when they are not on PATH.

- `ptx(cell)`, `sass(cell)`: the PTX that nvcc embeds in the fat binary (`cuobjdump -ptx`) and the SASS of the
  cubin (`cuobjdump -sass`); `disassemble(cell)`: `nvdisasm` with the source line of each instruction.
- `instructions(listing)`: the instructions of a listing (cuobjdump's, nvdisasm's or Triton's `asm["sass"]`), each
  with its predicate, opcode, operands and, from nvdisasm, its source line.
- `resources(cell)`: registers, stack and spilled bytes per kernel, as ptxas reports them (`-Xptxas -v`).
- `triton_asm(...)`: a Triton kernel compiled for an architecture in a child process (this process may be running
  Triton's interpreter), with what `kernel.asm` holds: "ttir", "ttgir", "llir", "ptx" and "sass".
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpu_ml import cuda
from gpu_ml.profile import find as find_beside_nvcc

TOOLS = ("cuobjdump", "nvdisasm")
DEFAULT_ARCH = "sm_90a"  # the reference GPU's (H100/H200): what the lessons read, whatever machine they run on
Cell = Any  # CUDA source (str), or a function that a `%%cuda` cell defined (gpu_ml.cuda.CudaFunction)


def find(name: str) -> str | None:
    """Path of cuobjdump or nvdisasm: on PATH, beside nvcc, or the copy in Triton's wheel; None if none is found."""
    if name not in TOOLS:
        raise ValueError(f"find(): one of {', '.join(TOOLS)}, got {name!r}")
    found = find_beside_nvcc(name)
    if found:
        return found
    spec = importlib.util.find_spec("triton")  # located without importing triton
    if spec is None or spec.origin is None:
        return None
    bundled = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / name
    return str(bundled) if bundled.exists() else None


def tool(name: str) -> str:
    """Path of cuobjdump or nvdisasm, or FileNotFoundError saying where it was looked for."""
    found = find(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found on PATH, beside nvcc, nor in Triton's wheel: it comes with the CUDA "
                                "toolkit (e.g. /usr/local/cuda/bin); add that folder to PATH")
    return found


def _run(command: Sequence[str]) -> str:
    done = subprocess.run(list(command), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(command[0]).name} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def source_of(cell: Cell) -> str:
    """The CUDA source of `cell`: the string itself, or the source of the `%%cuda` cell that defined a function."""
    if isinstance(cell, str):
        return cell
    library = getattr(cell, "library", None)
    if library is None:
        raise TypeError(f"expected CUDA source (a str) or a function of a %%cuda cell, got {type(cell).__name__}")
    text = (Path(library).parent / "cell.cu").read_text()
    return text.split(cuda._ERROR_HOOK)[0]  # the cell as written: the error hook is appended for the library build


def cubin(cell: Cell, *, arch: str = DEFAULT_ARCH, flags: Sequence[str] = ()) -> Path:
    """The cell's device code compiled for `arch` (cached, like every build of gpu_ml.cuda)."""
    return cuda.build(source_of(cell), library=True, device_only=True, arch=arch, flags=tuple(flags))


def fatbin(cell: Cell, *, arch: str = DEFAULT_ARCH, flags: Sequence[str] = ()) -> Path:
    """The cell's device code for `arch` with the PTX nvcc embeds beside it, as a fat binary (cached)."""
    return cuda.build(source_of(cell), library=True, fatbin=True, arch=arch, flags=tuple(flags))


def symbol_name(symbol: str) -> str:
    """The kernel's name in a (mangled) symbol: `saxpy` in `_Z5saxpyifPKfPf`, `ns::scale` in `_ZN2ns5scaleEPf`,
    `hgemm_mma_kernel` in `_Z16hgemm_mma_kernelI6__halfEvPKT_...`; an unmangled (extern "C") symbol as it is."""
    if not symbol.startswith("_Z"):
        return symbol
    rest, parts = symbol[2:], []
    nested = rest.startswith("N")
    rest = rest[1:] if nested else rest
    while rest[:1].isdigit():
        digits = re.match(r"\d+", rest)[0]
        size = int(digits)
        parts.append(rest[len(digits):len(digits) + size])
        rest = rest[len(digits) + size:]
        if not nested:
            break
    return "::".join(parts) if parts else symbol


def matches(symbol: str, name: str) -> bool:
    """Whether the (mangled) symbol is the kernel `name`: `_Z5saxpyifPKfPf` is `saxpy`; so is an extern "C" `saxpy`."""
    return symbol == name or symbol_name(symbol) == name


def functions(listing: str) -> dict[str, str]:
    """symbol -> its part of a SASS listing, for cuobjdump's ("Function : NAME"), nvdisasm's (".text.NAME:") and
    Triton's ("Function:NAME") layouts."""
    heads = re.compile(r"^\s*(?:Function\s*:\s*(\S+)|\.text\.(\S+):)\s*$", re.M)
    found = list(heads.finditer(listing))
    return {(m[1] or m[2]): listing[m.start():(found[i + 1].start() if i + 1 < len(found) else len(listing))]
            for i, m in enumerate(found)}


def _one(parts: Mapping[str, str], kernel: str | None, what: str) -> str:
    if kernel is None:
        return "".join(parts.values())
    hits = [text for symbol, text in parts.items() if matches(symbol, kernel)]
    if len(hits) != 1:
        raise KeyError(f"{len(hits)} {what} named {kernel!r}; there are: {', '.join(parts) or 'none'}")
    return hits[0]


def sass(cell: Cell, *, arch: str = DEFAULT_ARCH, flags: Sequence[str] = (), kernel: str | None = None) -> str:
    """`cuobjdump -sass` of the cell's cubin for `arch`: every kernel, or the one named `kernel`."""
    listing = _run([tool("cuobjdump"), "-sass", str(cubin(cell, arch=arch, flags=flags))])
    return _one(functions(listing), kernel, "kernels")


def ptx(cell: Cell, *, arch: str = DEFAULT_ARCH, flags: Sequence[str] = (), kernel: str | None = None) -> str:
    """The PTX that nvcc embedded for `arch` in the cell's fat binary (`cuobjdump -ptx`): the whole module, or the
    `.entry` of the kernel named `kernel`."""
    listing = _run([tool("cuobjdump"), "-ptx", str(fatbin(cell, arch=arch, flags=flags))])
    parts = re.split(r"^Fatbin (ptx|elf) code:\s*$", listing, flags=re.M)  # [before, kind, text, kind, text, ...]
    sections = [text for kind, text in zip(parts[1::2], parts[2::2], strict=True) if kind == "ptx"]
    chosen = [s for s in sections if re.search(rf"^arch = {re.escape(arch)}\s*$", s, re.M)] or sections[-1:]
    if not chosen:
        raise RuntimeError(f"no PTX in the fat binary for {arch}")
    module = chosen[0][chosen[0].find(".version"):] if ".version" in chosen[0] else chosen[0]
    if kernel is None:
        return module
    entries = {}
    for match in re.finditer(r"^\.(?:visible|weak)?\s*\.entry\s+(\w+)\s*\(", module, re.M):
        end = module.find("\n}", match.end())
        entries[match[1]] = module[match.start():end + 2 if end >= 0 else len(module)]
    return _one(entries, kernel, "PTX entries")


def disassemble(cell: Cell, *, arch: str = DEFAULT_ARCH, flags: Sequence[str] = (), kernel: str | None = None) -> str:
    """`nvdisasm -g -c` of the cell's cubin: SASS with a `//## File "...", line N` comment wherever the source line
    changes (the cells are built with -lineinfo), the folders of the files left out."""
    listing = _run([tool("nvdisasm"), "-g", "-c", str(cubin(cell, arch=arch, flags=flags))])
    listing = re.sub(r'//## File "(?:[^"]*/)?([^"/]*)"', r'//## File "\1"', listing)
    listing = re.sub(r'//## File "cell\.\d+\.cu"', '//## File "cell.cu"', listing)  # the name it had while built
    return _one(functions(listing), kernel, "kernels")


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction: `@!P0 LDG.E.128.CONSTANT R8, desc[UR4][R2.64] ;` has the predicate "!P0", the opcode
    "LDG.E.128.CONSTANT" (the mnemonic "LDG") and the operands "R8, desc[UR4][R2.64]"."""

    address: int | None
    predicate: str | None
    opcode: str
    operands: str
    line: int | None = None  # the source line (nvdisasm -g listings only)
    file: str | None = None

    @property
    def mnemonic(self) -> str:
        return self.opcode.split(".")[0]

    @property
    def modifiers(self) -> tuple[str, ...]:
        return tuple(self.opcode.split(".")[1:])

    def __str__(self) -> str:
        return f"{'@' + self.predicate + ' ' if self.predicate else ''}{self.opcode} {self.operands}".strip() + " ;"


# /*0090*/ @P0 EXIT ; (cuobjdump, nvdisasm) or "--:-:-:Y:0<TAB>@P0 EXIT;" (Triton's asm["sass"], control codes first)
_INSTRUCTION = re.compile(r"^\s*(?:/\*(?P<address>[0-9a-f]{4,})\*/)?\s*(?:[-0-9]{2}:[-0-9]:[-0-9]:[-Y]:[0-9a-f]\s+)?"
                          r"(?:@(?P<predicate>!?U?P(?:T|\d+))\s+)?(?P<opcode>[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)"
                          r"(?P<operands>[^;]*);")
_FILE_LINE = re.compile(r'//## File "(?P<file>[^"]*)", line (?P<line>\d+)')


def instructions(listing: str) -> list[Instruction]:
    """The instructions of a SASS listing in order; lines that are not instructions (headers, labels) are skipped."""
    found, file, line = [], None, None
    for text in listing.splitlines():
        where = _FILE_LINE.search(text)
        if where:
            file, line = where["file"], int(where["line"])
            continue
        match = _INSTRUCTION.match(text)
        if match:
            address = int(match["address"], 16) if match["address"] else None
            found.append(Instruction(address, match["predicate"], match["opcode"], match["operands"].strip(), line,
                                     file))
    return found


def count(listing: str | Iterable[Instruction], prefix: str) -> int:
    """How many instructions' opcodes start with `prefix` ("LDG.E.128", "LDSM", "STL")."""
    found = instructions(listing) if isinstance(listing, str) else listing
    return sum(ins.opcode.startswith(prefix) for ins in found)


@dataclass(frozen=True)
class Resources:
    """What ptxas reported for one kernel (`-Xptxas -v`)."""

    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int


def resources(cell: Cell, *, arch: str = DEFAULT_ARCH, flags: Sequence[str] = ()) -> dict[str, Resources]:
    """symbol -> Resources of every kernel of the cell compiled for `arch`, from ptxas's report (`-Xptxas -v`)."""
    return parse_ptxas(_ptxas_report(source_of(cell), arch, tuple(flags)))


@lru_cache(maxsize=64)
def _ptxas_report(source: str, arch: str, flags: tuple[str, ...]) -> str:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "cell.cu").write_text(source)
        command = [cuda.nvcc(), "-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-Xptxas", "-v",
                   *(f"-I{d}" for d in cuda.include_dirs()), *flags, "-o", "cell.cubin", "cell.cu"]
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        raise cuda.CudaCompileError(f"nvcc failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout + done.stderr


def parse_ptxas(report: str) -> dict[str, Resources]:
    """symbol -> Resources from ptxas's `-v` report ("Function properties for NAME", "... bytes spill stores, ...",
    "Used N registers, ... N bytes smem")."""
    found, name, spills = {}, None, (0, 0, 0)
    for line in report.splitlines():
        head = re.search(r"Function properties for (\S+)", line)
        if head:
            name, spills = head[1], (0, 0, 0)
            continue
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if frame:
            spills = tuple(int(g) for g in frame.groups())
            continue
        used = re.search(r"Used (\d+) registers", line)
        if used and name is not None:
            smem = re.search(r"(\d+) bytes smem", line)
            found[name] = Resources(int(used[1]), spills[0], spills[1], spills[2], int(smem[1]) if smem else 0)
            name = None
    return found


# ----------------------------------------------------------------------------- Triton, ahead of time

_CHILD = r"""
import json, os, subprocess, sys, tempfile
spec = json.loads(sys.argv[1])
import importlib
package = spec["module"].rsplit(".", 1)[0]
if package:
    importlib.import_module(package)  # gpu_ml.kernels.triton switches to the interpreter without a GPU: undone below
os.environ.pop("TRITON_INTERPRET", None)  # a kernel defined from here on is one the compiler can take
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
kernel = getattr(importlib.import_module(spec["module"]), spec["name"])
names = list(kernel.arg_names)
attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in spec["aligned"]}
source = ASTSource(kernel, signature=spec["signature"], constexprs=spec["constexprs"], attrs=attrs)
compiled = triton.compile(source, target=GPUTarget("cuda", spec["capability"], 32), options=spec["options"])
asm = {key: compiled.asm[key] for key in ("ttir", "ttgir", "llir", "ptx") if key in compiled.asm}
asm["sass"] = compiled.asm["sass"]  # Triton runs cuobjdump on the cubin when this key is first asked for
with tempfile.NamedTemporaryFile(suffix=".cubin") as f:  # and cuobjdump's own layout, as gpu_ml.asm.sass gives it
    f.write(compiled.asm["cubin"])
    f.flush()
    asm["cuobjdump"] = subprocess.run([spec["cuobjdump"], "-sass", f.name], capture_output=True, text=True,
                                      check=True).stdout
print("\n@@ASM@@" + json.dumps(asm))
"""


def triton_asm(kernel: str, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None = None, *,
               arch: str = DEFAULT_ARCH, aligned: Iterable[str] = (), options: Mapping[str, Any] | None = None,
               timeout: float = 600) -> dict[str, str]:
    """Compile the Triton kernel "package.module:name" for `arch` ahead of time, in a child process, and return what
    its `kernel.asm` holds: "ttir", "ttgir", "llir", "ptx", "sass" (Triton's layout of it), and "cuobjdump" (the
    same SASS in cuobjdump's layout). `signature` gives each non-constexpr argument's type as Triton's JIT names it
    ("*fp32", "i32"); `constexprs` the values of the others. `aligned` names the arguments the compiler may take as
    multiples of 16 (for a pointer: 16-byte aligned), as the JIT does at a launch for each such argument it is given.
    A child process, because a kernel defined under Triton's interpreter (CPU mode) cannot be compiled."""
    module, _, name = kernel.partition(":")
    if not module or not name:
        raise ValueError(f"triton_asm(): name the kernel as 'package.module:kernel_name', got {kernel!r}")
    spec = {"module": module, "name": name, "signature": dict(signature), "constexprs": dict(constexprs or {}),
            "aligned": list(aligned), "options": dict(options or {}), "capability": cuda.arch_number(arch),
            "cuobjdump": tool("cuobjdump")}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=Path(__file__).resolve().parents[1])
    if done.returncode != 0 or "@@ASM@@" not in done.stdout:
        raise RuntimeError(f"compiling {kernel} for {arch} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return json.loads(done.stdout.rsplit("@@ASM@@", 1)[1])
