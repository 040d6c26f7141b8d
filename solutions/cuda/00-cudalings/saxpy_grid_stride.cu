// cudaling: saxpy_grid_stride
__global__ void saxpy_kernel(const float* x, const float* y, float* out, float a, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;  // threads in the whole grid
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = a * x[i] + y[i];
}

extern "C" int saxpy_grid_stride(const float* x, const float* y, float* out, float a, long long n, int blocks,
                                 int threads) {
    saxpy_kernel<<<blocks, threads>>>(x, y, out, a, n);
    return (int)cudaGetLastError();
}
