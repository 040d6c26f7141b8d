// exercise: table_lookup
#include <vector>

__global__ void lookup_kernel(const float* table, const int* idx, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = table[idx[i]];
}

extern "C" int table_lookup(const int* idx, float* out, int n, int table_size) {
    std::vector<float> table(table_size);  // built on the host
    for (int k = 0; k < table_size; ++k) table[k] = 1.0f + 0.25f * k;

    const size_t bytes = (size_t)table_size * sizeof(float);  // sizes are in bytes, not elements
    float* d_table = nullptr;
    cudaError_t err = cudaMalloc(&d_table, bytes);
    if (err != cudaSuccess) return (int)err;  // nothing to free
    err = cudaMemcpy(d_table, table.data(), bytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess) {
        lookup_kernel<<<(n + 255) / 256, 256>>>(d_table, idx, out, n);
        err = cudaGetLastError();
    }
    // cudaFree waits for the kernel that still reads the table (it synchronizes), then frees it.
    cudaError_t freed = cudaFree(d_table);
    return (int)(err != cudaSuccess ? err : freed);  // the first error
}
