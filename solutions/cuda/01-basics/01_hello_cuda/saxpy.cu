// exercise: saxpy
__global__ void saxpy_kernel(float a, const float* x, float* y, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;  // threads in the whole grid
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = a * x[i] + y[i];  // each element is visited by exactly one thread, once
}

extern "C" int saxpy(float a, const float* x, float* y, long long n, int blocks, int threads) {
    saxpy_kernel<<<blocks, threads>>>(a, x, y, n);
    return (int)cudaGetLastError();
}
