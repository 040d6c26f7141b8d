// cudaling: whoami
__global__ void whoami_kernel(int* block_of, int* thread_of) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // this thread's element: blocks before it, then its place
    block_of[i] = blockIdx.x;
    thread_of[i] = threadIdx.x;
}

extern "C" int whoami(int* block_of, int* thread_of, int blocks, int threads) {
    whoami_kernel<<<blocks, threads>>>(block_of, thread_of);
    return (int)cudaGetLastError();
}
