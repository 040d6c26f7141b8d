// exercise: copy_occupancy
__global__ void copy_kernel(const float* __restrict__ in, float* __restrict__ out, int n) {
    const long long stride = (long long)gridDim.x * blockDim.x;  // threads in the whole grid
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = in[i];
}

extern "C" int copy_occupancy(const float* in, float* out, int n, int* config) {
    int min_grid = 0, block = 0;
    // The block size of highest occupancy, and the grid that fills every SM once with it.
    cudaError_t err = cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, copy_kernel, 0, 0);
    if (err != cudaSuccess) return (int)err;
    copy_kernel<<<min_grid, block>>>(in, out, n);  // one wave: the grid-stride loop covers any n
    err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;
    const int chosen[2] = {block, min_grid};
    return (int)cudaMemcpy(config, chosen, sizeof chosen, cudaMemcpyHostToDevice);
}
