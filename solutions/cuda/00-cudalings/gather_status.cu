// cudaling: gather_status
__device__ int bad_index;  // set to 1 by any thread whose index is out of range

__global__ void gather_kernel(const float* x, const int* idx, float* out, int n, int m) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int j = idx[i];
    if (j < 0 || j >= m) {
        out[i] = 0.0f;
        bad_index = 1;  // every offending thread stores the same value: no atomic needed
    } else {
        out[i] = x[j];
    }
}

extern "C" int gather_status(const float* x, const int* idx, float* out, int n, int m) {
    const int zero = 0;
    cudaError_t err = cudaMemcpyToSymbol(bad_index, &zero, sizeof(int));  // reset: an earlier call may have set it
    if (err != cudaSuccess) return (int)err;
    gather_kernel<<<(n + 255) / 256, 256>>>(x, idx, out, n, m);
    err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;
    int bad = 0;
    err = cudaMemcpyFromSymbol(&bad, bad_index, sizeof(int));  // waits for the kernel to finish
    if (err != cudaSuccess) return (int)err;
    return bad ? -1 : 0;
}
