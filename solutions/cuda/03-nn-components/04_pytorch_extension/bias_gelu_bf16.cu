// exercise: bias_gelu_bf16
#include <cuda_bf16.h>
#define THREADS 256

// y = GELU(x + b) (exact form) for bf16 x, b and y, computed in fp32 and rounded to bf16 once, at the store.
// Thread: one column c, its bias loaded once; block row g of G: rows g, g + G, g + 2G, ...
__global__ void bias_gelu_bf16_kernel(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, int rows,
                                      int cols) {
    const int c = blockIdx.x * THREADS + threadIdx.x;
    if (c >= cols) return;
    const float bias = __bfloat162float(b[c]);
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        // the sum in fp32: exact for two bf16 values; rounding it to bf16 here would round twice
        const float z = __bfloat162float(x[r * cols + c]) + bias;
        const float out = z * 0.5f * (1.0f + erff(z * 0.7071067811865476f));
        y[r * cols + c] = __float2bfloat16(out);  // round to nearest even, once
    }
}

extern "C" int bias_gelu_bf16(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, int rows, int cols) {
    dim3 grid((cols + THREADS - 1) / THREADS, rows < 8 ? rows : 8);  // 8 groups of rows (fewer if fewer rows)
    bias_gelu_bf16_kernel<<<grid, THREADS>>>(x, b, y, rows, cols);
    return (int)cudaGetLastError();
}
