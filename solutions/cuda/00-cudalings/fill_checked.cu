// cudaling: fill_checked
// Like CHECK from gpu_ml.cuh, but it returns the error instead of exiting: exit() in a library would end the
// Python process (the Jupyter kernel) along with the program.
#define RETURN_IF_ERROR(call)                      \
    do {                                           \
        cudaError_t err_ = (call);                 \
        if (err_ != cudaSuccess) return (int)err_; \
    } while (0)

__global__ void fill_kernel(float* out, float value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}

extern "C" int fill_checked(float* out, float value, int n, int threads) {
    fill_kernel<<<(n + threads - 1) / threads, threads>>>(out, value, n);
    RETURN_IF_ERROR(cudaGetLastError());       // launch errors: a bad configuration, too many resources
    RETURN_IF_ERROR(cudaDeviceSynchronize());  // errors while the kernel ran
    return 0;
}
