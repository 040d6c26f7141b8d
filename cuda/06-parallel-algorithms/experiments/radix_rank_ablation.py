"""The onesweep radix sort of 03_radix_sort.ipynb ranking with 8 warp ballots per row (cuda/radix_tile.cuh as
exported) and with __match_any_sync (-DRADIX_MATCH_ANY), at 16, 24 and 32 keys per thread, against torch.sort:
2^28 uniform int32 keys, each result checked against torch.sort. Run on a GPU machine from the repository root:
    python3 cuda/06-parallel-algorithms/experiments/radix_rank_ablation.py
Its H200 output is kept beside it in radix_rank_ablation.txt."""

import torch

from gpu_ml.bench import bench
from gpu_ml.cuda import cuda_cell

SOURCE = r"""
#include "cuda/radix_sort.cuh"
extern "C" long long words_for(long long n, int items) { return radix_status_words(n, items, true); }
extern "C" int sort_keys(const unsigned* x, unsigned* y, unsigned* alt, int* counts, long long* status, long long n,
                         int items, cudaStream_t stream) {
    auto run = items == 16 ? radix_onesweep_with<16> : items == 24 ? radix_onesweep_with<24> : radix_onesweep_with<32>;
    return run(x, nullptr, y, nullptr, alt, nullptr, counts, status, n, RADIX_INT32, stream);
}
"""

variants = {}
for name, flags in (("__match_any_sync", "-DRADIX_MATCH_ANY"), ("8 ballots", "")):
    built = {}
    cuda_cell(flags, SOURCE, built)
    variants[name] = (built["sort_keys"], built["words_for"])
n = 2**28
x = torch.randint(-(2**31), 2**31 - 1, (n,), device="cuda", dtype=torch.int32)
y, alt = torch.empty_like(x), torch.empty_like(x)
counts = torch.empty(2 * 4 * 256, dtype=torch.int32, device="cuda")
expected = torch.sort(x).values
ms = {"torch.sort": bench(lambda: torch.sort(x), cudagraph=True)}
for name, (sort_keys, words_for) in variants.items():
    sort_keys.sync = words_for.sync = False
    for items in (16, 24, 32):
        status = torch.empty(words_for(n, items), dtype=torch.int64, device="cuda")
        sort_keys(x, y, alt, counts, status, n, items)
        torch.cuda.synchronize()
        right = torch.equal(y, expected)
        ms[f"{name}, {items}/thread{'' if right else ' WRONG'}"] = bench(
            lambda f=sort_keys, s=status, k=items: f(x, y, alt, counts, s, n, k), cudagraph=True)
print(f"{torch.cuda.get_device_name()}; onesweep radix sort of 2^28 uniform int32 keys, timed from CUDA graphs")
for name, t in ms.items():
    print(f"{name:>28}: {t:7.3f} ms {n / t / 1e6:6.2f} Gkeys/s {ms['torch.sort'] / t:5.3f}x torch.sort")
