// cudaling: histogram
__global__ void histogram_kernel(const int* x, int* hist, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&hist[x[i]], 1);  // many threads may hit one bin: the add must be atomic
}

extern "C" int histogram(const int* x, int* hist, int n, int bins) {  // every x[i] is in [0, bins)
    cudaError_t err = cudaMemset(hist, 0, bins * sizeof(int));
    if (err != cudaSuccess) return (int)err;
    histogram_kernel<<<256, 256>>>(x, hist, n);
    return (int)cudaGetLastError();
}
