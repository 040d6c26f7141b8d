// exercise: histogram_ballot
#define THREADS 256

// Warp aggregation with votes alone: `todo` holds the valid lanes whose key is not counted yet, the same in every
// lane, so the loop stays converged. Each round the lowest of them leads: its key goes to every lane by a shuffle,
// the lanes holding it answer a ballot, the leader adds their number, and they leave `todo`. One round, and one
// atomic, per distinct key of the warp; lanes past n vote with valid = false and are never counted.
__global__ void histogram_ballot_kernel(const int* __restrict__ keys, int* hist, int n, int bins) {
    const int lane = threadIdx.x % 32;
    const int i = blockIdx.x * THREADS + threadIdx.x;
    const int key = i < n ? keys[i] : -1;
    const bool valid = i < n && key >= 0 && key < bins;  // keys outside [0, bins) are not counted
    unsigned todo = __ballot_sync(0xffffffffu, valid);
    while (todo) {
        const int leader = __ffs(todo) - 1;
        const int leader_key = __shfl_sync(0xffffffffu, key, leader);
        const unsigned peers = __ballot_sync(0xffffffffu, valid && key == leader_key);
        if (lane == leader) atomicAdd(hist + key, __popc(peers));
        todo &= ~peers;
    }
}

extern "C" int histogram_ballot(const int* keys, int* hist, int n, int bins) {
    if (n < 1 || bins < 1) return -1;
    const cudaError_t err = cudaMemset(hist, 0, bins * sizeof(int));
    if (err != cudaSuccess) return (int)err;
    histogram_ballot_kernel<<<(n + THREADS - 1) / THREADS, THREADS>>>(keys, hist, n, bins);
    return (int)cudaGetLastError();
}
