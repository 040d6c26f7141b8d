// exercise: bias_silu_bwd
#define THREADS 256

// dx = dy * SiLU'(x + b), and row g of partials: the sum of dx over the rows of group g, per column.
__global__ void bias_silu_bwd_kernel(const float* dy, const float* x, const float* b, float* dx, float* partials,
                                     int rows, int cols) {
    const int c = blockIdx.x * THREADS + threadIdx.x;
    if (c >= cols) return;
    const float bias = b[c];
    float acc = 0.0f;
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const float z = x[r * cols + c] + bias;
        const float s = 1.0f / (1.0f + expf(-z));  // sigmoid: 0 for z = -1e4 (1 / inf), 1 for z = 1e4
        // SiLU'(z) = s + z s (1 - s) = s (1 + z (1 - s)): no exp(z) / (1 + exp(z))^2, which is inf / inf at z = 100
        const float d = dy[r * cols + c] * (s * (1.0f + z * (1.0f - s)));
        dx[r * cols + c] = d;
        acc += d;
    }
    partials[(long long)blockIdx.y * cols + c] = acc;  // also for a group with no rows: its sum is 0
}

// db[c] = the sum of the groups' partials of column c, in a fixed order (given).
__global__ void column_sum_kernel(const float* partials, float* db, int groups, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float a = 0.0f;
    for (int g = 0; g < groups; ++g) a += partials[(long long)g * cols + c];
    db[c] = a;
}

extern "C" int bias_silu_bwd(const float* dy, const float* x, const float* b, float* dx, float* db, float* partials,
                             int rows, int cols, int groups) {
    dim3 grid((cols + THREADS - 1) / THREADS, groups);
    bias_silu_bwd_kernel<<<grid, THREADS>>>(dy, x, b, dx, partials, rows, cols);
    column_sum_kernel<<<(cols + THREADS - 1) / THREADS, THREADS>>>(partials, db, groups, cols);
    return (int)cudaGetLastError();
}
