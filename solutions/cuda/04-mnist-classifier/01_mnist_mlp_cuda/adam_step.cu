// exercise: adam_step
// Adam over flat fp32 buffers, torch.optim.Adam semantics (no weight decay, no amsgrad), at step t:
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2;
//   p = p - lr * (m / bc1) / (sqrt(v / bc2) + eps),   bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (from the host).
__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, float lr, float beta1, float beta2, float eps, float bc1, float bc2,
                            long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        const float gi = g[i];
        const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        // eps outside the square root, after the bias correction of v: as PyTorch
        p[i] -= lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    }
}

// Returns 0, or -1 (nothing launched) for n < 0; n = 0 launches nothing.
extern "C" int adam_step(float* p, const float* g, float* m, float* v, float lr, float beta1, float beta2, float eps,
                         float bc1, float bc2, long long n, cudaStream_t stream) {
    if (n < 0) return -1;
    if (n == 0) return 0;
    long long blocks = (n + 255) / 256;
    if (blocks > 4096) blocks = 4096;  // a grid-stride loop covers the rest
    adam_kernel<<<(unsigned)blocks, 256, 0, stream>>>(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2, n);
    return (int)cudaGetLastError();
}
