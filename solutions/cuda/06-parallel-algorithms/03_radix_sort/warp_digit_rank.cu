// Solution: the peers of a lane are the lanes with its digit (__match_any_sync, which every lane of the warp calls,
// those past the end too, with a digit no key has); its rank is how many of them lie below it.
__global__ void warp_digit_rank_kernel(const unsigned* __restrict__ digits, int* __restrict__ rank, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned d = i < n ? digits[i] : 0xffffffffu;  // a lane past the end still takes part, with no peers
    const unsigned peers = __match_any_sync(0xffffffffu, d);
    const unsigned below = (1u << (threadIdx.x % 32)) - 1u;
    const int before = __popc(peers & below);
    if (i < n) rank[i] = before;
}

extern "C" int warp_digit_rank(const unsigned* digits, int* rank, int n) {
    if (n < 1) return -1;
    warp_digit_rank_kernel<<<(n + 255) / 256, 256>>>(digits, rank, n);
    return (int)cudaGetLastError();
}
