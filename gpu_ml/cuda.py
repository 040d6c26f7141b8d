"""`%%cuda`: compile CUDA C++ from a notebook cell with nvcc, run it or call it on torch tensors.

Program mode (the cell defines `main`): compile, run, show stdout/stderr; a compile error, a
non-zero exit or a timeout raises. Library mode (no `main`): build a shared library and put each
`extern "C"` host function into the notebook as a Python callable that checks its tensor
arguments (CUDA device, dtype, contiguity) against the C parameter types before calling, and
turns CUDA errors into `CudaError`. Without a GPU the cell is still compiled (a real nvcc check);
programs are not run (except `--host` ones, which launch no kernel) and library functions raise when called.
A program's stdout is left in the notebook as `cuda_output`, for the next cell to check, and the built executable's
path as `cuda_program` (to run it again, e.g. under compute-sanitizer: gpu_ml.sanitize). Every cell can
`#include "gpu_ml.cuh"` (the track's shared helpers, gpu_ml/include), the kernels the lessons export
(`#include "cuda/softmax_warp.cuh"`, gpu_ml/kernels/cuda; see gpu_ml.export) and, with the nvidia-cutlass
package installed (a dependency of the project), CUTLASS and CuTe (`#include <cute/layout.hpp>`).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import importlib.metadata
import importlib.util
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_ml.env import arch_number, capability, has_gpu, nvcc_arch

if TYPE_CHECKING:
    import torch

DEFAULT_ARCH = "sm_80"  # without a GPU to ask: Ampere, the oldest arch with bf16 mma and cp.async
PROGRAMS_TIME_THEMSELVES = True  # run_program: a notebook's program may print its own timings, so it runs with
# the GPU alone under `gpu-ml test`; a test file, which times none, sets False (conftest.py): its programs pause with it


class CudaCompileError(RuntimeError):
    """nvcc rejected the source; the message holds nvcc's output."""


class CudaRunError(RuntimeError):
    """A compiled program exited non-zero or ran past its timeout."""


class CudaError(RuntimeError):
    """A CUDA runtime error reported after a library call."""


# C type -> torch dtype name for pointer parameters; None means any dtype (void*).
_POINTER_TYPES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "__half": "float16",
    "__nv_bfloat16": "bfloat16",
    "nv_bfloat16": "bfloat16",
    "int": "int32",
    "int32_t": "int32",
    "unsigned": "int32",
    "unsigned int": "int32",
    "uint32_t": "int32",
    "int64_t": "int64",
    "long long": "int64",
    "long": "int64",
    "int16_t": "int16",
    "short": "int16",
    "int8_t": "int8",
    "char": "int8",
    "uint8_t": "uint8",
    "unsigned char": "uint8",
    "bool": "bool",
    "void": None,
}
# C scalar type -> ctypes type.
_SCALAR_TYPES = {
    "int": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "unsigned": ctypes.c_uint,
    "unsigned int": ctypes.c_uint,
    "uint32_t": ctypes.c_uint32,
    "long": ctypes.c_long,
    "long long": ctypes.c_longlong,
    "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "bool": ctypes.c_bool,
    "cudaStream_t": ctypes.c_void_p,  # never passed from Python: filled with torch's current stream
}
# C integer type -> the values it holds (ctypes would wrap anything outside silently: 2**32 + 1 as an int is 1).
_INT_RANGES = {
    c: (0, 2 ** (8 * ctypes.sizeof(t)) - 1) if c.startswith(("unsigned", "uint", "size_t"))
    else (-(2 ** (8 * ctypes.sizeof(t) - 1)), 2 ** (8 * ctypes.sizeof(t) - 1) - 1)
    for c, t in _SCALAR_TYPES.items() if c not in ("float", "double", "bool", "cudaStream_t")
}
_FLOAT_MAX = 3.4028234663852886e38
STREAM = "cudaStream_t"
INCLUDE_DIR = Path(__file__).parent / "include"  # on every cell's include path: #include "gpu_ml.cuh"
KERNELS_DIR = Path(__file__).parent / "kernels"  # too: #include "cuda/softmax_warp.cuh" (a lesson exported it)
_QUALIFIERS = re.compile(r"\b(const|__restrict__|__restrict|restrict|volatile)\b")
_EXTERN_C = re.compile(r'extern\s+"C"\s+(?:__host__\s+)?([A-Za-z_][\w\s]*?)\s+(\w+)\s*\(([^)]*)\)\s*\{')
_MAIN = re.compile(r"\bint\s+main\s*\(")
# gcc's warning about an exported header cell's `#pragma once` when the cell is compiled on its own, as the main file
# (an artefact of the check, not of the code), with the two lines that quote it.
_PRAGMA_ONCE = re.compile(r"^cell\.cu:\d+:\d+: warning: #pragma once in main file\n.*\n.*\^.*(\n|$)", re.M)
_EXPORT = re.compile(r"\A\s*//\| export (cuda/\w+\.cuh)\s*$", re.MULTILINE)
# Where this process's exported cells put their source as they run (see cuda_cell): searched before gpu_ml/kernels,
# so a cell that includes "cuda/NAME.cuh" compiles what the notebook just ran, even before `gpu-ml export`.
_SESSION = f"{os.getpid()}-{os.urandom(4).hex()}"

# Appended to every library so Python can read (and clear) the CUDA error state of its runtime.
_ERROR_HOOK = """
#include <cstring>
extern "C" int gpu_ml_last_error(int sync, char* msg, int n) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && sync) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { std::strncpy(msg, cudaGetErrorString(e), n - 1); msg[n - 1] = 0; }
    return (int)e;
}
"""


@dataclass(frozen=True)
class Param:
    """One C parameter: a pointer (checked as a tensor) or a scalar."""

    name: str
    ctype: str
    pointer: bool

    @property
    def dtype(self):
        """The torch dtype a pointer parameter requires, or None for `void*`."""
        import torch

        dtype_name = _POINTER_TYPES[self.ctype]
        return None if dtype_name is None else getattr(torch, dtype_name)


def _parse_param(text: str, function: str) -> Param:
    text = " ".join(_QUALIFIERS.sub(" ", text).split())
    pointer = "*" in text
    if text.count("*") > 1:
        raise ValueError(f"{function}: pointer-to-pointer parameter {text!r} is not supported")
    text = text.replace("*", " ")
    words = text.split()
    if len(words) < 2:
        raise ValueError(f"{function}: parameter {text!r} needs a type and a name")
    ctype, name = " ".join(words[:-1]), words[-1]
    table = _POINTER_TYPES if pointer else _SCALAR_TYPES
    if ctype not in table:
        kind = "pointer" if pointer else "scalar"
        raise ValueError(f"{function}: unsupported {kind} parameter type {ctype!r} (supported: {sorted(table)})")
    return Param(name, ctype, pointer)


def parse_signatures(source: str) -> dict[str, tuple[str, list[Param]]]:
    """The `extern "C"` functions defined in `source`: name -> (return type, parameters)."""
    functions = {}
    for match in _EXTERN_C.finditer(source):
        ret, name, params = " ".join(match.group(1).split()), match.group(2), match.group(3).strip()
        if ret not in ("void", *_SCALAR_TYPES):
            raise ValueError(f"{name}: unsupported return type {ret!r}")
        plist = [] if params in ("", "void") else [_parse_param(p, name) for p in params.split(",")]
        functions[name] = (ret, plist)
    return functions


def nvcc() -> str:
    """Path of nvcc: on PATH, else under CUDA_HOME or /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").exists():
            return str(Path(root) / "bin" / "nvcc")
    raise FileNotFoundError("nvcc not found: install the CUDA toolkit or set CUDA_HOME (see README, Troubleshooting)")


def has_nvcc() -> bool:
    """Whether nvcc() finds a compiler (CUDA cells then compile, with or without a GPU)."""
    try:
        nvcc()
    except FileNotFoundError:
        return False
    return True


def default_arch() -> str:
    """nvcc -arch for this machine's GPU (sm_90a on an H100/H200; the emulated one under GPU_ML_EMULATE),
    or DEFAULT_ARCH without one."""
    cap = capability()
    return DEFAULT_ARCH if cap is None else nvcc_arch(cap)


def _cache_dir() -> Path:
    root = os.environ.get("GPU_ML_CACHE") or Path.home() / ".cache" / "gpu_ml"
    return Path(root) / "cuda"


def exported_dir() -> Path:
    """This process's copies of the exported header cells it has run: exported_dir()/cuda/NAME.cuh."""
    return _cache_dir() / "exported" / _SESSION


def cutlass_include_dir() -> Path | None:
    """The folder holding CUTLASS's and CuTe's headers (cutlass/, cute/) in the nvidia-cutlass package, or None
    when that package is not installed."""
    spec = importlib.util.find_spec("cutlass_library")  # finds the package without importing it
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "source" / "include"
    return folder if (folder / "cute").is_dir() else None


def include_dirs() -> list[Path]:
    """nvcc's -I folders, searched in this order: this session's exported cells, gpu_ml/include, gpu_ml/kernels,
    and, when the nvidia-cutlass package is installed, CUTLASS's headers and its utilities beside them
    (tools/util/include: `#include <cutlass/util/packed_stride.hpp>`)."""
    cutlass = cutlass_include_dir()
    util = cutlass.parent / "tools" / "util" / "include" if cutlass else None
    return [exported_dir(), INCLUDE_DIR, KERNELS_DIR, *([cutlass] if cutlass else []),
            *([util] if util is not None and util.is_dir() else [])]


def include_digest() -> str:
    """A hash of every file a cell can `#include` from gpu_ml: gpu_ml/include, gpu_ml/kernels/cuda and
    the exported cells this process has run, and the version of CUTLASS's headers (not their 800 files).

    Part of each build's cache key, so that editing the shared header or re-exporting a lesson's
    kernels rebuilds the cells that might include them.
    """
    digest = hashlib.sha256()
    if cutlass_include_dir() is not None:
        digest.update(f"nvidia-cutlass {importlib.metadata.version('nvidia-cutlass')}\0".encode())
    for name, folder in (("include", INCLUDE_DIR), ("kernels/cuda", KERNELS_DIR / "cuda"),
                         ("session", exported_dir())):
        files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
        for path in files:
            digest.update(f"{name}/{path.relative_to(folder).as_posix()}\0".encode())
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def build(
    source: str,
    *,
    library: bool,
    device_only: bool = False,
    fatbin: bool = False,
    arch: str | None = None,
    flags: list[str] | tuple[str, ...] = (),
    timeout: float = 300,
) -> Path:
    """Compile `source` with nvcc into an executable, (library=True) a shared library, or (device_only=True) only
    its device code, a cubin for `arch`: the check that a cell compiles for a GPU this machine does not have.
    fatbin=True builds only the device code too, as a fat binary holding the SASS for `arch` and the PTX that nvcc
    embeds beside it (what `cuobjdump -ptx` reads; gpu_ml.asm).

    `include_dirs()` are on the include path. Builds are cached by a hash of the source, mode, arch,
    flags, nvcc version and every file those folders offer (`include_digest`). Raises
    CudaCompileError with nvcc's message when compilation fails. Warnings are printed.
    """
    compiler = nvcc()
    arch = arch or default_arch()
    if device_only and fatbin:
        raise ValueError("build(): device_only (a cubin) and fatbin (a fat binary) exclude each other")
    device = "cubin" if device_only else "fatbin" if fatbin else None
    if library and device is None:
        source = source + _ERROR_HOOK
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    headers = include_digest()  # part of the key: a changed header or exported kernel rebuilds
    mode = device or str(library)
    key = hashlib.sha256("\0".join([source, mode, arch, *flags, version, headers]).encode()).hexdigest()[:20]
    folder = _cache_dir() / key
    target = folder / (f"cell.{device}" if device else "libcell.so" if library else "cell")
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    # Per-process names until the build is done: two processes (gpu-ml test) may build the same cell at once.
    cell, partial = folder / f"cell.{os.getpid()}.cu", f"{target}.{os.getpid()}.tmp"
    cell.write_text(source)
    cmd = [compiler, "-O3", f"-arch={arch}", "-std=c++17", "-lineinfo", *(f"-I{d}" for d in include_dirs()),
           "-o", partial, cell.name]
    if device:
        cmd[1:1] = [f"-{device}"]
    elif library:
        cmd[1:1] = ["-shared", "-Xcompiler", "-fPIC"]
    cmd += list(flags)
    try:
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise CudaCompileError(f"nvcc took longer than {timeout:g} s") from exc
    os.replace(cell, folder / "cell.cu")  # the source stays beside the build, for a reader (or a failed build)
    message = _PRAGMA_ONCE.sub("", (proc.stdout + proc.stderr).replace(cell.name, "cell.cu")).strip()
    if proc.returncode != 0:
        raise CudaCompileError(f"nvcc failed (exit {proc.returncode}):\n{message}\n"
                               f"command: {shlex.join(cmd).replace(cell.name, 'cell.cu')}")
    if message:
        print(message, file=sys.stderr)
    os.replace(partial, target)
    return target


def run_program(
    exe: Path, args: list[str] | tuple[str, ...] = (), *, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run a compiled program; raise CudaRunError on a non-zero exit or a timeout. Where `gpu-ml test` runs
    notebooks side by side on one GPU, it has the GPU to itself (it may time itself) unless PROGRAMS_TIME_THEMSELVES
    is False (gpu_ml.bench.run_child)."""
    from gpu_ml.bench import run_child

    try:
        proc = run_child([str(exe), *args], timeout=timeout, alone=PROGRAMS_TIME_THEMSELVES)
    except subprocess.TimeoutExpired as exc:
        raise CudaRunError(f"program ran longer than {timeout:g} s and was killed") from exc
    if proc.returncode != 0:
        raise CudaRunError(
            f"program exited with code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


def current_stream(tensor: torch.Tensor | None = None) -> int:
    """PyTorch's current CUDA stream on `tensor`'s device (else the current device), as an integer handle.

    Inside `torch.cuda.stream(s)` it is `s`, inside a CUDA-graph capture the capturing stream.
    `torch.cuda.current_stream().cuda_stream` gives the same number; the raw getter that Triton's
    launcher and torch.compile's generated code call skips building a Stream object, which matters
    when it runs before every launch of a training step.
    """
    import torch

    index = tensor.get_device() if tensor is not None else torch.cuda.current_device()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream


class CudaFunction:
    """A library-mode `extern "C"` host function, callable with torch tensors and Python scalars.

    A `cudaStream_t` parameter is not passed from Python: each call fills it with PyTorch's
    current stream on the device of the first tensor argument (`current_stream`), so that the
    kernels run in order with PyTorch's work and inside a CUDA-graph capture. Every call checks
    its arguments before calling into C. Afterwards it checks the CUDA error state; with
    `sync=True` (the default) it also synchronizes so that faults inside the kernel surface here.
    Set `sync = False` for benchmarking, where a sync per call would add latency.
    """

    def __init__(self, lib: ctypes.CDLL, name: str, restype: str, params: list[Param]):
        self.name, self.params, self.sync = name, params, True
        self.library = Path(lib._name)  # the built .so; its folder also holds the cell's source, cell.cu
        self._lib = lib
        self._fn = getattr(lib, name)
        self._fn.restype = None if restype == "void" else _SCALAR_TYPES[restype]
        self._fn.argtypes = [ctypes.c_void_p if p.pointer else _SCALAR_TYPES[p.ctype] for p in params]
        self._message = ctypes.create_string_buffer(512)  # where the error hook writes; reused by every call
        self._gpu_seen = False
        self._passed = [p for p in params if p.ctype != STREAM]  # what the Python caller gives
        self._dtypes = [p.dtype if p.pointer else None for p in self._passed]  # looked up once, not per call
        self._streams = [i for i, p in enumerate(params) if p.ctype == STREAM]  # filled in by each call
        self._first_tensor = next((i for i, p in enumerate(self._passed) if p.pointer), None)  # whose device

    def __repr__(self) -> str:
        args = ", ".join(f"{p.ctype}{'*' if p.pointer else ''} {p.name}" for p in self.params)
        return f"{self.name}({args})"

    def _convert(self, param: Param, dtype, value):
        # Runs for every argument of every call (11 launches per MNIST training step): the happy path
        # does no string formatting; messages are built only when a check fails.
        import torch  # (here, not at the top: compiling a cell does not need torch)

        if param.pointer:
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{self._where(param)} is a {param.ctype}* and needs a torch.Tensor, "
                                f"got {type(value).__name__}")
            if not value.is_cuda:
                raise ValueError(f"{self._where(param)} must be a CUDA tensor, got one on {value.device}")
            if dtype is not None and value.dtype != dtype:
                raise TypeError(f"{self._where(param)} is a {param.ctype}* and needs dtype {dtype}, "
                                f"got {value.dtype}")
            if not value.is_contiguous():
                raise ValueError(f"{self._where(param)} must be contiguous (call .contiguous())")
            return value.data_ptr()
        if param.ctype in ("float", "double"):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TypeError(f"{self._where(param)} is a {param.ctype} and needs a number, "
                                f"got {type(value).__name__}")
            if param.ctype == "float" and math.isfinite(value) and abs(value) > _FLOAT_MAX:
                raise ValueError(f"{self._where(param)} is a float, and {value!r} is beyond its range")
            return float(value)
        if param.ctype == "bool":
            if not isinstance(value, (bool, int)):
                raise TypeError(f"{self._where(param)} is a bool and needs a bool, got {type(value).__name__}")
            return bool(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{self._where(param)} is a {param.ctype} and needs an int, got {type(value).__name__}")
        low, high = _INT_RANGES[param.ctype]
        if not low <= value <= high:
            raise ValueError(f"{self._where(param)} is a {param.ctype}: {value} is outside [{low}, {high}]")
        return value

    def _where(self, param: Param) -> str:
        return f"{self.name}(): argument {param.name!r}"

    def __call__(self, *args):
        if len(args) != len(self._passed):
            filled = f" (the {STREAM} is filled in: PyTorch's current stream)" if self._streams else ""
            raise TypeError(f"{self!r} takes {len(self._passed)} arguments{filled}, got {len(args)}")
        converted = [self._convert(p, d, a) for p, d, a in zip(self._passed, self._dtypes, args, strict=True)]
        if not self._gpu_seen:  # asked once: the answer does not change while the process runs
            if not has_gpu():
                raise RuntimeError(f"{self.name}() launches CUDA kernels and needs a CUDA GPU; this machine has none")
            self._gpu_seen = True
        if self._streams:
            stream = current_stream(None if self._first_tensor is None else args[self._first_tensor])
            for i in self._streams:
                converted.insert(i, stream)
        result = self._fn(*converted)
        if self._lib.gpu_ml_last_error(int(self.sync), self._message, len(self._message)):
            raise CudaError(f"{self.name}(): {self._message.value.decode()}")
        return result

    def checked(self, *args) -> None:
        """Call a host function that returns 0 once it has launched, and raise if it returned anything else.

        Not `assert fn(...) == 0`: under `python -O` that call, and the launch with it, would vanish.
        """
        rc = self(*args)
        if rc != 0:
            raise RuntimeError(f"{self.name}() refused to launch (returned {rc}): its launch configuration is invalid")


def load_library(path: Path, source: str) -> dict[str, CudaFunction]:
    """Load a built library and wrap the `extern "C"` functions that `source` defines."""
    lib = ctypes.CDLL(str(path))
    lib.gpu_ml_last_error.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.gpu_ml_last_error.restype = ctypes.c_int
    return {name: CudaFunction(lib, name, ret, params) for name, (ret, params) in parse_signatures(source).items()}


def _magic_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="%%cuda", add_help=False)
    parser.add_argument("--arch", help="nvcc -arch (default: this GPU's, e.g. sm_90a)")
    parser.add_argument("--min-arch", help="the oldest arch the cell compiles for, e.g. sm_80 (cp.async, bf16 "
                        "WMMA): on an older GPU it is built for this one, as a check, and cannot run there")
    parser.add_argument("--host", action="store_true", help="host code only, no kernel (e.g. CuTe layouts "
                        "printed): such a program runs without a GPU too, and one build checks it for every arch")
    parser.add_argument("--timeout", type=float, default=60, help="program run timeout in seconds")
    parser.add_argument("--args", default="", help="command-line arguments for the program")
    return parser


def _build_cell(line: str, cell: str) -> tuple[Path, argparse.Namespace, bool]:
    """Build a `%%cuda` cell as `cuda_cell` runs it (and export its header): (the build, the magic's options,
    whether this GPU is older than the cell's --min-arch)."""
    options, flags = _magic_parser().parse_known_args(shlex.split(line))
    too_old = bool(options.min_arch) and arch_number(default_arch()) < arch_number(options.min_arch)
    if too_old and options.arch is None:
        options.arch = options.min_arch
    if _MAIN.search(cell):
        return build(cell, library=False, arch=options.arch, flags=flags), options, too_old
    export = _EXPORT.match(cell)
    if not parse_signatures(cell) and export is None:  # fail on unsupported signatures before compiling
        raise ValueError('%%cuda: the cell has neither main() nor an extern "C" host function to call from Python '
                         '(nor an `//| export cuda/NAME.cuh` first line)')
    path = build(cell, library=True, arch=options.arch, flags=flags)
    if export is not None:
        header = exported_dir() / export.group(1)
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text(cell)
    return path, options, too_old


def cuda_cell(line: str, cell: str, namespace: dict | None = None):
    """Implementation of `%%cuda [--arch A | --min-arch A] [--host] [--timeout S] [--args "..."] [nvcc flags...]`.

    A cell whose first line is `//| export cuda/NAME.cuh` (see gpu_ml.export) may hold only device
    code and kernels: it is compiled as a check, and once it compiles, later cells of this process
    that `#include "cuda/NAME.cuh"` get this cell's text (before `gpu-ml export` has copied it into
    gpu_ml/kernels). One cell per exported header: a second cell exporting the same file replaces it.
    """
    path, options, too_old = _build_cell(line, cell)
    if too_old and has_gpu():
        print(f"built for {options.min_arch}, the oldest GPU its code compiles for: this GPU ({default_arch()}) "
              "cannot run it, and the cells that would are skipped")
    if _MAIN.search(cell):
        if (not has_gpu() and not options.host) or too_old:
            why = "no CUDA GPU on this machine" if not has_gpu() else f"this GPU is older than {options.min_arch}"
            print(f"compiled {path.name} for {options.arch or default_arch()}; not run: {why}")
            if namespace is not None:
                namespace["cuda_output"] = None  # not an earlier program's output
                namespace["cuda_program"] = path  # built all the same
            return None
        if namespace is not None:
            namespace["cuda_program"] = path  # before the run, which may raise
        proc = run_program(path, shlex.split(options.args), timeout=options.timeout)
        if namespace is not None:
            namespace["cuda_output"] = proc.stdout
        print(proc.stdout, end="")
        if proc.stderr:
            print(proc.stderr, end="", file=sys.stderr)
        return None
    wrapped = load_library(path, cell) if parse_signatures(cell) else {}
    if namespace is not None:
        namespace.update(wrapped)
    if wrapped:
        print("compiled: " + ", ".join(repr(f) for f in wrapped.values()))
    export = _EXPORT.match(cell)
    if export is not None:
        print(f'compiled {export.group(1)}: later cells can #include "{export.group(1)}"')
    return None


def build_notebook(notebook: str | Path) -> tuple[int, list[str]]:
    """Compile the `%%cuda` cells of `notebook` in order, as running it would (exported headers included), and run
    none: the builds land in the cache, where the notebook then finds them (`gpu-ml test` does this for every
    notebook at once, on all cores, before running them one by one). Returns (cells built, the errors of the
    cells that did not build: the notebook's own run reports them)."""
    import json

    built, errors = 0, []
    for index, cell in enumerate(json.loads(Path(notebook).read_text())["cells"]):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] != "code" or not source.startswith("%%cuda"):
            continue
        line, _, body = (source if source.endswith("\n") else source + "\n").partition("\n")  # as IPython does
        try:
            _build_cell(line.removeprefix("%%cuda"), body)
            built += 1
        except (CudaCompileError, ValueError) as exc:
            errors.append(f"cell {index}: {str(exc).splitlines()[0]}")
    return built, errors


try:
    from IPython.core.magic import Magics, cell_magic, magics_class

    @magics_class
    class CudaMagics(Magics):
        """Registers `%%cuda`; `gpu_ml.setup()` loads it."""

        @cell_magic
        def cuda(self, line: str, cell: str):
            return cuda_cell(line, cell, self.shell.user_ns)

except ImportError:  # IPython is optional outside notebooks
    CudaMagics = None


def load_ipython_extension(ipython) -> None:
    """`%load_ext gpu_ml.cuda` registers `%%cuda` without calling setup()."""
    ipython.register_magics(CudaMagics)
