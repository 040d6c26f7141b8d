"""The Triton half of the architecture matrix (tests/test_arch_matrix.py), in child processes.

`record OUT.json TEST_FILE...`: run the test files (tests/test_kernels.py, tests/test_kernels_matmul_attention.py)
in Triton's interpreter and write down the launches of the kernels of gpu_ml.kernels (up to PER_KERNEL each):
module and name, the argument types as Triton's JIT mangles them, the constexpr values and the launch options.
These are the interpreter's shapes and configurations, not the GPU's tuned ones, and fp16 stands for bf16 (the
interpreter has none): a check that every kernel compiles for each architecture, not of every configuration it may
be given.

`notebook_recorder(FOLDER)` (called by an IPython startup file that conftest.py gives the notebooks' kernels on a
CPU): each kernel defined in a notebook cell records its launches in the interpreter, as JSON lines under FOLDER,
with the source of a module that defines it again (its own cell source, the notebook-defined jit functions it calls,
the imports and scalar constants it reads). `compile-notebooks FOLDER ARCH...` compiles those for each target;
conftest.py runs it when the whole session ends and fails the session, naming notebook, cell and target.

`compile IN.json ARCH...`: compile each of those specializations ahead of time for each target (`triton.compile`
with a `GPUTarget`: no GPU needed) and print the failures as JSON. Separate processes, because in interpreter mode
`@triton.jit` makes interpreted functions, which cannot be compiled; and several of each kind, run side by side
(one per test file, one per target), because each takes minutes on one core.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("sm_75", "sm_80", "sm_89", "sm_90a")  # T4, A100, L4/RTX 4090, H100/H200: the architecture matrix
OPTIONS = ("num_warps", "num_stages")
PER_KERNEL = 2  # specializations kept per kernel (the first seen with distinct argument types and constexprs)


def record(out: Path, test_files: list[str]) -> int:
    os.environ["TRITON_INTERPRET"] = "1"
    import pytest
    from triton.runtime.interpreter import InterpretedFunction

    from gpu_ml.notebook import patch_interpreter

    patch_interpreter()  # as setup() does on a CPU: Triton 3.6 + NumPy 2 fail scalar loops and int sums that wrap

    seen: dict[str, dict] = {}
    original = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        fn = self.fn
        if fn.__module__.startswith("gpu_ml.kernels."):
            entry = _specialization(self, args, kwargs)
            if entry is not None and sum(e["name"] == fn.__name__ and e["module"] == fn.__module__
                                         for e in seen.values()) < PER_KERNEL:
                seen[json.dumps(entry, sort_keys=True)] = entry
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    os.environ.pop("PYTEST_ADDOPTS", None)  # no xdist workers (CI's -n auto): the launches must happen here
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-x", *test_files])
    out.write_text(json.dumps(list(seen.values()), indent=1))
    return int(code)


def _specialization(kernel, args: tuple, kwargs: dict) -> dict | None:
    """What a launch of the InterpretedFunction `kernel` specializes on: module, name, argument types as Triton's
    JIT mangles them, constexpr values and launch options; None when a constexpr is not a plain value."""
    from triton.runtime.jit import mangle_type

    fn, names = kernel.fn, list(kernel.arg_names)
    bound = dict(zip(names, args, strict=False)) | {k: v for k, v in kwargs.items() if k in names}
    constexprs = {n: v for n, v in bound.items() if _is_constexpr(fn, n)}
    if not all(isinstance(v, (bool, int, float, str)) for v in constexprs.values()):
        return None
    return {"module": fn.__module__, "name": fn.__name__,
            "signature": {n: "constexpr" if n in constexprs else mangle_type(bound[n]) for n in names},
            "constexprs": constexprs, "options": {k: v for k, v in kwargs.items() if k in OPTIONS}}


def _is_constexpr(fn, name: str) -> bool:
    import inspect

    annotation = inspect.signature(fn).parameters[name].annotation
    return "constexpr" in str(annotation)


def _jit_python_function(value):
    """The Python function of a @triton.jit function in either mode (JITFunction or InterpretedFunction), or None."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return value.fn if isinstance(value, (JITFunction, InterpretedFunction)) else None


def module_text(fn) -> str:
    """A module that defines the notebook-defined jit function `fn` again: the imports and scalar constants its
    globals give, the notebook's jit functions it calls (before it), then its own source under @triton.jit."""
    import inspect
    import textwrap
    import types

    import triton.language as tl

    header, bodies, seen = ["import triton"], [], set()

    def visit(f) -> None:
        if f.__name__ in seen:
            return
        seen.add(f.__name__)
        source = textwrap.dedent(inspect.getsource(f)).splitlines()
        start = next(i for i, ln in enumerate(source) if ln.startswith("def "))  # its decorators are dropped
        source = source[start:]
        # Every identifier of its source: what its code reads, and `tl` of `B: tl.constexpr` (not in co_names).
        for name in sorted(set(re.findall(r"[A-Za-z_]\w*", "\n".join(source)))):
            if name not in f.__globals__:
                continue
            value = f.__globals__[name]
            inner = _jit_python_function(value)
            if isinstance(value, types.ModuleType):
                line = f"import {value.__name__} as {name}"
            elif inner is not None and inner.__module__ == "__main__":
                visit(inner)
                continue
            elif inner is not None:
                line = f"from {inner.__module__} import {inner.__name__} as {name}"
            elif isinstance(value, tl.constexpr):
                line = f"{name} = triton.language.constexpr({value.value!r})"
            elif type(value) in (bool, int, float, str):
                line = f"{name} = {value!r}"
            else:
                continue  # not something a kernel can read; if it does, the compile says so
            if line not in header:
                header.append(line)
        bodies.append("\n".join(["@triton.jit", *source]))

    visit(fn)
    return "\n".join(header) + "\n\n\n" + "\n\n\n".join(bodies) + "\n"


def notebook_recorder(folder: str) -> None:
    """Record every launch of a notebook-defined kernel in this (interpreting) kernel process under `folder`."""
    from triton.runtime.interpreter import InterpretedFunction

    out = Path(folder) / f"launches_{os.getpid()}.jsonl"
    counts: dict[str, int] = {}
    original = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        fn = self.fn
        if fn.__module__ == "__main__" and counts.get(fn.__name__, 0) < PER_KERNEL:
            try:
                entry = _specialization(self, args, kwargs)
                if entry is not None:
                    entry |= {"cwd": os.getcwd(), "source": module_text(fn)}
                    counts[fn.__name__] = counts.get(fn.__name__, 0) + 1
                    with open(out, "a") as f:
                        f.write(json.dumps(entry) + "\n")
            except Exception as exc:  # noqa: BLE001 (a recorder must never change what the notebook does)
                with open(out, "a") as f:
                    f.write(json.dumps({"name": fn.__name__, "error": f"not recorded: {exc!r}"}) + "\n")
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run


def compile_notebooks(folder: Path, archs: list[str]) -> int:
    """Compile the launches notebook_recorder wrote under `folder` for each arch; print the failures as JSON."""
    import hashlib

    entries, failures, seen = [], [], set()
    modules = folder / f"modules_{os.getpid()}"  # one folder per process: the targets compile side by side
    modules.mkdir()
    for path in sorted(folder.glob("launches_*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if "error" in entry:
                failures.append({"kernel": entry["name"], "arch": "-", "name": entry["name"], "cwd": entry.get("cwd"),
                                 "constexprs": {}, "error": entry["error"]})
                continue
            key = json.dumps({k: entry[k] for k in ("source", "signature", "constexprs", "options")}, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            module = "nb_" + hashlib.sha1(entry["source"].encode()).hexdigest()[:16]
            (modules / f"{module}.py").write_text(entry["source"])
            entries.append({**entry, "module": module})
    sys.path.insert(0, str(modules))
    failures += _compile(entries, archs)
    print(json.dumps(failures))
    return 0


def compile_all(path: Path, archs: list[str]) -> int:
    print(json.dumps(_compile(json.loads(path.read_text()), archs)))
    return 0


def _compile(entries: list[dict], archs: list[str]) -> list[dict]:
    import importlib

    import gpu_ml.kernels.triton  # noqa: F401 (without a GPU it switches Triton to the interpreter: undone here)

    os.environ.pop("TRITON_INTERPRET", None)  # so that the kernel modules below define compilable JITFunctions
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import triton

    failures = []
    for entry in entries:
        try:
            kernel = getattr(importlib.import_module(entry["module"]), entry["name"])
        except Exception as exc:  # noqa: BLE001 (a module rebuilt from a notebook may not import)
            failures.append({"kernel": f"{entry['module']}.{entry['name']}", "arch": "-", "constexprs": {},
                             "name": entry["name"], "cwd": entry.get("cwd"),
                             "error": f"{type(exc).__name__}: {exc}"[:500]})
            continue
        # The interpreter has no bf16: its fp16 launches stand for bf16 too, on sm_80 (the oldest GPU with bf16).
        bf16 = {n: t.replace("fp16", "bf16") for n, t in entry["signature"].items()}
        for arch, signature in [(a, entry["signature"]) for a in archs] + [
                (a, bf16) for a in archs if a == "sm_80" and bf16 != entry["signature"]]:
            capability = int(arch.removeprefix("sm_").rstrip("a"))
            try:
                source = ASTSource(kernel, signature=signature, constexprs=entry["constexprs"])
                triton.compile(source, target=GPUTarget("cuda", capability, 32), options=entry["options"])
            except Exception as exc:  # noqa: BLE001 (every failure is reported, with its kernel and target)
                failures.append({"kernel": f"{entry['module']}.{entry['name']}", "arch": arch,
                                 "signature": signature, "constexprs": entry["constexprs"],
                                 "name": entry["name"], "cwd": entry.get("cwd"),
                                 "error": f"{type(exc).__name__}: {exc}"[:500]})
    return failures


if __name__ == "__main__":
    command, path, *rest = sys.argv[1:]
    commands = {"record": record, "compile": compile_all, "compile-notebooks": compile_notebooks}
    sys.exit(commands[command](Path(path), rest))
