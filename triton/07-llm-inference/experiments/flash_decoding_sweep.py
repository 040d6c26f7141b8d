"""Where the time of flash-decoding at batch 1 goes (02_paged_attention.ipynb, section 7): the exported
paged_attention at several split counts, its split kernel alone (so the merge's share shows), launch parameters
(tile, warps, pipeline stages) at 32k tokens, and two ways to hide the merge: launching it with programmatic
dependent launch (PDL, sm_90+) and merging in the last program of each K/V head (an atomic counter per head).
bf16, GQA 32/8, d = 128, pages of 16, each result checked against the exported kernel. Run on a GPU machine
from the repository root:
    python3 triton/07-llm-inference/experiments/flash_decoding_sweep.py
Its H200 output is kept beside it in flash_decoding_sweep.txt (run when split_kernel held its own copy of the loop
that it now imports, attend_tokens: the same operations)."""

import random
import sys

import torch
import triton.language as tl

import triton
from gpu_ml.bench import bench, gbps
from gpu_ml.hardware import read_bandwidth
from gpu_ml.kernels.triton import paged_attention as pa
from gpu_ml.kernels.triton.paged_attention import attend_tokens
from gpu_ml.kernels.triton.paged_kv import PagedKVCache

H, G, D, PAGE = 32, 8, 128, 16
ONLY = sys.argv[1:]  # section names to run (default: all)


@triton.jit
def split_kernel(q_ptr, k_ptr, v_ptr, tables_ptr, lengths_ptr, o_ptr, lse_ptr, count_ptr, out_ptr, scale,
                 stride_qb, stride_qh, stride_kb, stride_ks, stride_kh, stride_tb,
                 stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                 GROUP: tl.constexpr, BLOCK_G: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
                 D: tl.constexpr, SPLITS: tl.constexpr, FUSED: tl.constexpr, EARLY: tl.constexpr,
                 WHOLE_TILES: tl.constexpr = True):
    """pa.paged_decode_kernel for bf16 with SPLITS > 1 (its loop, attend_tokens, imported), plus: EARLY lets a
    PDL-launched merge start at once; FUSED makes the last program of each (b, kvh) to finish merge the splits
    (count_ptr: one counter each)."""
    if EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    b, kvh, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    length = tl.load(lengths_ptr + b)
    if WHOLE_TILES:  # as exported: splits of whole tiles (the last splits may get less, or nothing)
        chunk = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK_N) * BLOCK_N
    else:  # every split within a token of the others, its last tile masked
        chunk = tl.cdiv(length, SPLITS)
    start, end = s * chunk, tl.minimum((s + 1) * chunk, length)
    heads = kvh * GROUP + tl.arange(0, BLOCK_G)
    head_ok = tl.arange(0, BLOCK_G) < GROUP
    d = tl.arange(0, D)
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=head_ok[:, None], other=0.0)
    acc, m, denom = attend_tokens(q, k_ptr, v_ptr, tables_ptr, b, kvh, start, end, scale, stride_kb, stride_ks,
                                  stride_kh, stride_tb, BLOCK_G, PAGE, BLOCK_N, D, False)
    denom = tl.where(denom == 0.0, 1.0, denom)
    tl.store(o_ptr + b * stride_ob + heads[:, None] * stride_oh + s * stride_os + d[None, :], acc / denom[:, None],
             mask=head_ok[:, None])
    tl.store(lse_ptr + b * stride_lb + heads * stride_lh + s, m + tl.log(denom), mask=head_ok)
    if FUSED:
        tl.debug_barrier()  # every thread's stores are done before one thread releases them
        done = tl.atomic_add(count_ptr + b * tl.num_programs(1) + kvh, 1, sem="acq_rel")
        if done == SPLITS - 1:  # the last: every other split's part is visible (acquire)
            tl.store(count_ptr + b * tl.num_programs(1) + kvh, 0)  # ready for the next call
            ss = tl.arange(0, SPLITS)
            for g in range(GROUP):
                h = kvh * GROUP + g
                lse = tl.load(lse_ptr + b * stride_lb + h * stride_lh + ss, cache_modifier=".cg")
                w = tl.exp(lse - tl.max(lse, axis=0))
                part = tl.load(o_ptr + b * stride_ob + h * stride_oh + ss[:, None] * stride_os + d[None, :],
                               cache_modifier=".cg")  # written by other SMs: past this SM's L1
                o = tl.sum(part * w[:, None], axis=0) / tl.sum(w, axis=0)
                tl.store(out_ptr + b * stride_qb + h * stride_qh + d, o.to(out_ptr.dtype.element_ty))


@triton.jit
def merge_kernel(part_ptr, lse_ptr, o_ptr, stride_pb, stride_ph, stride_ps, stride_lb, stride_lh,
                 stride_ob, stride_oh, SPLITS: tl.constexpr, D: tl.constexpr, WAIT: tl.constexpr,
                 SPLITS_P2: tl.constexpr = None, BLOCK_D: tl.constexpr = None):
    """pa.merge_splits_kernel, waiting for the split kernel's results first when launched with PDL; any number of
    splits (padded to SPLITS_P2), and BLOCK_D of the D outputs per program (program_id(2) picks which)."""
    if WAIT:
        tl.extra.cuda.gdc_wait()
    b, h = tl.program_id(0), tl.program_id(1)
    s, d = tl.arange(0, SPLITS_P2), tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    lse = tl.load(lse_ptr + b * stride_lb + h * stride_lh + s, mask=s < SPLITS, other=float("-inf"))
    w = tl.exp(lse - tl.max(lse, axis=0))
    part = tl.load(part_ptr + b * stride_pb + h * stride_ph + s[:, None] * stride_ps + d[None, :],
                   mask=(s < SPLITS)[:, None], other=0.0)
    o = tl.sum(part * w[:, None], axis=0) / tl.sum(w, axis=0)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + d, o.to(o_ptr.dtype.element_ty))


def filled(n, seed=0):
    """One sequence of n random bf16 tokens in a pool whose blocks are handed out shuffled (as in the notebook)."""
    cache = PagedKVCache(-(-n // PAGE) + 2, PAGE, G, D, dtype=torch.bfloat16, device="cuda")
    random.Random(seed).shuffle(cache.free)
    cache.add(0)
    g = torch.Generator(device="cuda").manual_seed(seed)
    cache.append(0, *(torch.randn(n, G, D, generator=g, device="cuda").to(torch.bfloat16) for _ in "kv"))
    tables, lens = cache.block_tables([0])
    return cache, tables.clamp(min=0), lens


def variant(q, cache, tables, lens, splits, *, block_n=64, warps=4, stages=3, mode="two kernels", merge=True,
            whole_tiles=True, block_d=D):
    """A callable for one launch configuration: mode is 'two kernels', 'pdl', 'pdl early' or 'fused'; whole_tiles
    False gives every split the same number of tokens; block_d: outputs per merge program."""
    B = q.shape[0]
    out = torch.empty_like(q)
    part = torch.empty(B, H, splits, D, device="cuda", dtype=torch.float32)
    lse = torch.empty(B, H, splits, device="cuda", dtype=torch.float32)
    count = torch.zeros(B * G, device="cuda", dtype=torch.int32)
    k, v = cache.k, cache.v
    pdl = mode.startswith("pdl")

    def run():
        split_kernel[(B, G, splits)](
            q, k, v, tables, lens, part, lse, count, out, D ** -0.5,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2), tables.stride(0),
            part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
            GROUP=H // G, BLOCK_G=16, PAGE=PAGE, BLOCK_N=block_n, D=D, SPLITS=splits, FUSED=mode == "fused",
            EARLY=mode == "pdl early", WHOLE_TILES=whole_tiles, num_warps=warps, num_stages=stages)
        if merge and mode != "fused":
            merge_kernel[(B, H, D // block_d)](
                part, lse, out, part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
                out.stride(0), out.stride(1), SPLITS=splits, D=D, WAIT=pdl, SPLITS_P2=triton.next_power_of_2(splits),
                BLOCK_D=block_d, launch_pdl=pdl)
        return out
    return run


def exported(q, cache, tables, lens, splits):
    return lambda: pa.paged_attention(q, cache.k, cache.v, tables, lens, splits=splits)


def line(label, fn, nbytes, hbm, same, expected=None):
    try:
        return timed_line(label, fn, nbytes, hbm, same, expected)
    except Exception as e:  # noqa: BLE001 - a variant that fails is reported, the sweep goes on
        print(f"  {label}: {type(e).__name__}: {str(e)[:300]}", flush=True)


def timed_line(label, fn, nbytes, hbm, same, expected=None):
    if expected is not None:
        got = fn()
        torch.cuda.synchronize()
        err = (got.float() - expected.float()).abs().max().item()
        if err > 2e-2:
            label += f" WRONG (max error {err:.1e})"
    ms = bench(fn, cudagraph=True)
    print(f"  {label:52} {ms * 1e3:7.1f} us {gbps(nbytes, ms):6.0f} GB/s {gbps(nbytes, ms) / hbm:5.3f}x 1 GiB read "
          f"{gbps(nbytes, ms) / same:5.3f}x same-size read", flush=True)
    return ms


def main():
    print(torch.cuda.get_device_name(), "| torch", torch.__version__, "| triton", triton.__version__)
    hbm = read_bandwidth()
    print(f"read bandwidth, a sum over 1 GiB: {hbm:.0f} GB/s")
    for n in (32768, 65536, 131072):
        cache, tables, lens = filled(n)
        q = torch.randn(1, H, D, device="cuda", dtype=torch.bfloat16)
        nbytes = 2 * n * G * D * 2
        same = read_bandwidth(nbytes)
        expected = pa.paged_attention(q, cache.k, cache.v, tables, lens, splits=1)
        print(f"\nn = {n}: {nbytes / 2**20:.0f} MiB of K and V; a read of that many bytes: {same:.0f} GB/s "
              f"({nbytes / same / 1e3:.1f} us)")
        if not ONLY or "splits" in ONLY:
            for s in (16, 32, 64, 128):
                line(f"exported paged_attention, {s} splits", exported(q, cache, tables, lens, s), nbytes, hbm,
                     same, expected)
                line(f"  its split kernel alone, {s} splits", variant(q, cache, tables, lens, s, merge=False),
                     nbytes, hbm, same)
        if not ONLY or "merge" in ONLY:
            for s in (32, 64, 128):
                for mode in ("two kernels", "pdl", "pdl early", "fused"):
                    line(f"{mode}, {s} splits", variant(q, cache, tables, lens, s, mode=mode), nbytes, hbm, same,
                         expected)
        if "balance" in ONLY:  # second run: splits that fill every SM evenly, narrower merge programs
            for s in (64, 66, 128, 132):
                for whole in (True, False):
                    for block_d in (128, 32):
                        for mode in ("two kernels", "pdl early"):
                            line(f"{s} splits, {'whole tiles' if whole else 'even splits'}, merge {block_d} wide, "
                                 f"{mode}", variant(q, cache, tables, lens, s, whole_tiles=whole, block_d=block_d,
                                                    mode=mode), nbytes, hbm, same, expected)
                line(f"{s} splits, even splits, split kernel alone", variant(
                    q, cache, tables, lens, s, whole_tiles=False, merge=False), nbytes, hbm, same)
        if n == 32768 and (not ONLY or "tune" in ONLY):
            for s in (64, 128):
                for block_n in (32, 64, 128):
                    for warps in (2, 4, 8):
                        for stages in (2, 3, 4):
                            line(f"{s} splits, BLOCK_N {block_n}, {warps} warps, {stages} stages",
                                 variant(q, cache, tables, lens, s, block_n=block_n, warps=warps, stages=stages),
                                 nbytes, hbm, same, expected)


if __name__ == "__main__":
    main()
