// exercise: cross_entropy_rows
#include <cmath>
#define WARPS 4            // rows per block of 128 threads: one warp per row
#define IGNORE_INDEX -100  // as F.cross_entropy's default

// Merge the online pair (m2, s2) into (m, s): s is a sum of exp(x - m) over what has been seen, m its maximum.
__device__ void online_merge(float& m, float& s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    if (mn == -INFINITY) return;  // both have seen only -inf: keep (-inf, 0); exp(-inf - -inf) would be NaN
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

__global__ void cross_entropy_rows_kernel(const float* logits, const long long* targets, float* loss, float* grad,
                                          int rows, int V) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + warp;
    if (row >= rows) return;  // the whole warp leaves together
    const float* xr = logits + (long long)row * V;
    float* gr = grad + (long long)row * V;
    const long long t = targets[row];

    // pass 1: each lane's online (m, s) over its classes c = lane, lane + 32, ...
    float m = -INFINITY, s = 0.0f;
    for (int c = lane; c < V; c += 32) online_merge(m, s, xr[c], 1.0f);  // one element: (x, exp(x - x) = 1)
    for (int offset = 16; offset > 0; offset /= 2)  // then over the warp: every lane ends with the row's (m, s)
        online_merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
    const float log_s = logf(s);  // lse = m + log_s

    if (lane == 0) {
        float l = 0.0f;  // an ignored row
        if (t != IGNORE_INDEX) l = (t >= 0 && t < V) ? (m - xr[t]) + log_s : NAN;  // m - x_t first: exact at +-1e4
        loss[row] = l;
    }
    // pass 2: softmax - onehot, or 0 for an ignored row
    for (int c = lane; c < V; c += 32)
        gr[c] = t == IGNORE_INDEX ? 0.0f : expf(xr[c] - m - log_s) - (c == t ? 1.0f : 0.0f);
}

extern "C" int cross_entropy_rows(const float* logits, const long long* targets, float* loss, float* grad, int rows,
                                  int V) {
    cross_entropy_rows_kernel<<<(rows + WARPS - 1) / WARPS, WARPS * 32>>>(logits, targets, loss, grad, rows, V);
    return (int)cudaGetLastError();
}
