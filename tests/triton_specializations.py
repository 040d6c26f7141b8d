"""The Triton half of the architecture matrix (tests/test_arch_matrix.py), in child processes.

`record OUT.json TEST_FILE...`: run the test files (tests/test_kernels.py, tests/test_kernels_matmul_attention.py)
in Triton's interpreter and write down the launches of the kernels of gpu_ml.kernels (up to PER_KERNEL each):
module and name, the argument types as Triton's JIT mangles them, the constexpr values and the launch options.
These are the interpreter's shapes and configurations, not the GPU's tuned ones, and fp16 stands for bf16 (the
interpreter has none): a check that every kernel compiles for each architecture, not of every configuration it may
be given.

`compile IN.json ARCH...`: compile each of those specializations ahead of time for each target (`triton.compile`
with a `GPUTarget`: no GPU needed) and print the failures as JSON. Separate processes, because in interpreter mode
`@triton.jit` makes interpreted functions, which cannot be compiled; and several of each kind, run side by side
(one per test file, one per target), because each takes minutes on one core.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = ("num_warps", "num_stages")
PER_KERNEL = 2  # specializations kept per kernel (the first seen with distinct argument types and constexprs)


def record(out: Path, test_files: list[str]) -> int:
    os.environ["TRITON_INTERPRET"] = "1"
    import pytest
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import mangle_type

    from gpu_ml.notebook import patch_interpreter

    patch_interpreter()  # as setup() does on a CPU: Triton 3.6 + NumPy 2.4 fail loops over scalar arguments

    seen: dict[str, dict] = {}
    original = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        fn = self.fn
        if fn.__module__.startswith("gpu_ml.kernels."):
            names = list(self.arg_names)
            bound = dict(zip(names, args, strict=False)) | {k: v for k, v in kwargs.items() if k in names}
            constexprs = {n: v for n, v in bound.items() if _is_constexpr(fn, n)}
            if all(isinstance(v, (bool, int, float, str)) for v in constexprs.values()):
                signature = {n: "constexpr" if n in constexprs else mangle_type(bound[n]) for n in names}
                options = {k: v for k, v in kwargs.items() if k in OPTIONS}
                entry = {"module": fn.__module__, "name": fn.__name__, "signature": signature,
                         "constexprs": constexprs, "options": options}
                if sum(e["name"] == fn.__name__ and e["module"] == fn.__module__ for e in seen.values()) < PER_KERNEL:
                    seen[json.dumps(entry, sort_keys=True)] = entry
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    os.environ.pop("PYTEST_ADDOPTS", None)  # no xdist workers (CI's -n auto): the launches must happen here
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-x", *test_files])
    out.write_text(json.dumps(list(seen.values()), indent=1))
    return int(code)


def _is_constexpr(fn, name: str) -> bool:
    import inspect

    annotation = inspect.signature(fn).parameters[name].annotation
    return "constexpr" in str(annotation)


def compile_all(path: Path, archs: list[str]) -> int:
    import importlib

    import gpu_ml.kernels.triton  # noqa: F401 (without a GPU it switches Triton to the interpreter: undone here)

    os.environ.pop("TRITON_INTERPRET", None)  # so that the kernel modules below define compilable JITFunctions
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import triton

    failures = []
    for entry in json.loads(path.read_text()):
        kernel = getattr(importlib.import_module(entry["module"]), entry["name"])
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
                                 "error": f"{type(exc).__name__}: {exc}"[:500]})
    print(json.dumps(failures))
    return 0


if __name__ == "__main__":
    command, path, *rest = sys.argv[1:]
    sys.exit(record(Path(path), rest) if command == "record" else compile_all(Path(path), rest))
