// exercise: staged_upload
#include <cstring>
#include <vector>

// Copies the pageable host buffer src (n floats) into dst (device) through one pinned buffer of `chunk` floats,
// chunk by chunk: what the driver does for a cudaMemcpy from pageable memory.
static cudaError_t upload_through_pinned(float* dst, const float* src, int n, int chunk) {
    float* stage = nullptr;
    cudaError_t err = cudaMallocHost(&stage, (size_t)chunk * sizeof(float));  // page-locked
    if (err != cudaSuccess) return err;
    for (int start = 0; start < n && err == cudaSuccess; start += chunk) {
        const int count = n - start < chunk ? n - start : chunk;  // the last chunk may be shorter
        const size_t bytes = (size_t)count * sizeof(float);
        memcpy(stage, src + start, bytes);  // the CPU copies into the pinned buffer
        // The DMA engine copies it over. From pinned memory cudaMemcpy returns once the copy is done, so the
        // next iteration may refill the buffer.
        err = cudaMemcpy(dst + start, stage, bytes, cudaMemcpyHostToDevice);
    }
    cudaError_t freed = cudaFreeHost(stage);
    return err != cudaSuccess ? err : freed;
}

extern "C" int staged_upload(float* dst, int n, int chunk) {
    std::vector<float> src(n);  // pageable host memory
    for (int i = 0; i < n; ++i) src[i] = 0.5f * i;  // exact in fp32 below 2^24
    return (int)upload_through_pinned(dst, src.data(), n, chunk);
}
