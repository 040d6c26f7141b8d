// cudaling: histogram_shared
#define MAX_BINS 1024

__global__ void histogram_shared_kernel(const int* x, int* hist, int n, int bins) {
    __shared__ int local[MAX_BINS];  // this block's private histogram
    for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[x[i]], 1);  // shared-memory atomics: contention stays inside the block
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        if (local[b] != 0) atomicAdd(&hist[b], local[b]);  // at most one global atomic per bin and block
}

extern "C" int histogram_shared(const int* x, int* hist, int n, int bins) {  // 1 <= bins <= MAX_BINS
    if (bins > MAX_BINS) return (int)cudaErrorInvalidValue;
    cudaError_t err = cudaMemset(hist, 0, bins * sizeof(int));
    if (err != cudaSuccess) return (int)err;
    histogram_shared_kernel<<<64, 256>>>(x, hist, n, bins);
    return (int)cudaGetLastError();
}
