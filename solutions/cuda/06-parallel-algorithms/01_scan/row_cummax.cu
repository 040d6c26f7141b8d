// exercise: row_cummax
#define THREADS 1024  // one block per row, one element per thread: rows of at most 1024

// The running maximum: the same block scan with max for +, and -inf (the identity of max) for 0, both where a lane
// with no element brings its value and where the warps' totals start.
__global__ void row_cummax_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float totals[THREADS / 32];
    const int c = threadIdx.x, lane = c % 32, warp = c / 32;
    const long long row = (long long)blockIdx.x * cols;
    float v = c < cols ? x[row + c] : -INFINITY;
    for (int d = 1; d < 32; d *= 2) {
        const float up = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v = fmaxf(v, up);
    }
    if (lane == 31) totals[warp] = v;
    __syncthreads();
    float before = -INFINITY;
    for (int w = 0; w < warp; ++w) before = fmaxf(before, totals[w]);
    if (c < cols) y[row + c] = fmaxf(before, v);
}

extern "C" int row_cummax(const float* x, float* y, int rows, int cols) {
    if (rows < 1 || cols < 1 || cols > THREADS) return -1;
    row_cummax_kernel<<<rows, THREADS>>>(x, y, cols);
    return (int)cudaGetLastError();
}
