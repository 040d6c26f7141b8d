// cudaling: reverse_cp_async
#define CHUNK 1024   // floats per block
#define THREADS 256  // each thread copies one 16-byte piece: 4 floats

__global__ void reverse_cp_async_kernel(const float* x, float* out) {
    __shared__ __align__(16) float tile[CHUNK];
    const int t = threadIdx.x;
    const float* src = x + (size_t)blockIdx.x * CHUNK;
    float* dst = out + (size_t)blockIdx.x * CHUNK;
    // global -> shared without passing through registers; the copy runs while the thread goes on
    const unsigned smem = (unsigned)__cvta_generic_to_shared(&tile[4 * t]);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(src + 4 * t) : "memory");
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");  // this thread's copies have landed
    __syncthreads();                                         // and every other thread's
    for (int j = t; j < CHUNK; j += THREADS) dst[j] = tile[CHUNK - 1 - j];
}

extern "C" int reverse_cp_async(const float* x, float* out, int n) {  // n: a multiple of CHUNK
    reverse_cp_async_kernel<<<n / CHUNK, THREADS>>>(x, out);
    return (int)cudaGetLastError();
}
