// exercise: bias_silu_fwd
#define THREADS 256

// y = SiLU(x + b) = z * sigmoid(z), z = x + b[c]. Thread: one column c, its bias loaded once;
// block row g of G: rows g, g + G, g + 2G, ...
__global__ void bias_silu_fwd_kernel(const float* x, const float* b, float* y, int rows, int cols) {
    const int c = blockIdx.x * THREADS + threadIdx.x;
    if (c >= cols) return;  // past the last column: nothing to do
    const float bias = b[c];
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const float z = x[r * cols + c] + bias;
        // z / (1 + e^-z): for z = -100, e^100 = inf and z / inf = -0 (right); for z = 100, e^-100 = 0.
        y[r * cols + c] = z / (1.0f + expf(-z));
    }
}

extern "C" int bias_silu_fwd(const float* x, const float* b, float* y, int rows, int cols) {
    dim3 grid((cols + THREADS - 1) / THREADS, rows < 8 ? rows : 8);  // 8 groups of rows (fewer if fewer rows)
    bias_silu_fwd_kernel<<<grid, THREADS>>>(x, b, y, rows, cols);
    return (int)cudaGetLastError();
}
