// exercise: managed_scale
__global__ void scale_kernel(float* data, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] *= a;
}

extern "C" int managed_scale(float* out, int n, float a) {
    float* data = nullptr;
    cudaError_t err = cudaMallocManaged(&data, (size_t)n * sizeof(float));
    if (err != cudaSuccess) return (int)err;
    for (int i = 0; i < n; ++i) data[i] = (float)i;  // first touch on the host: the pages live in host memory

    scale_kernel<<<(n + 255) / 256, 256>>>(data, a, n);  // the pages migrate to the GPU on demand
    err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaDeviceSynchronize();  // the launch returned at once: wait for the kernel
    if (err == cudaSuccess) {
        for (int i = 0; i < n; ++i) data[i] += 1.0f;  // the host reads and writes what the kernel wrote
        err = cudaMemcpy(out, data, (size_t)n * sizeof(float), cudaMemcpyDefault);  // managed -> device tensor
    }

    cudaError_t freed = cudaFree(data);
    return (int)(err != cudaSuccess ? err : freed);
}
