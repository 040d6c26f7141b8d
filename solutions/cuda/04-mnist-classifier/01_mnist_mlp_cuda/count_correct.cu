// exercise: count_correct
#include <cmath>
#define WARPS 8  // rows per block of 256 threads: one warp per row

// correct[0] += 1 for each row whose prediction, the index of its FIRST largest logit (torch.argmax's rule),
// equals its label. Lanes take the classes c = lane, lane + 32, ...
__global__ void count_correct_kernel(const float* logits, const long long* labels, int* correct, int M, int C) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + warp;
    if (row >= M) return;  // the whole warp leaves together
    const float* zr = logits + (long long)row * C;
    float best = -INFINITY;
    int arg = C;  // no class yet: larger than any index, so any real one wins a tie against it
    for (int c = lane; c < C; c += 32)
        if (zr[c] > best || arg == C) {  // strictly larger: a later equal value does not replace an earlier one
            best = zr[c];
            arg = c;
        }
    for (int offset = 16; offset > 0; offset /= 2) {  // butterfly: every lane ends with the row's (best, arg)
        const float other = __shfl_xor_sync(0xffffffffu, best, offset);
        const int other_arg = __shfl_xor_sync(0xffffffffu, arg, offset);
        if (other > best || (other == best && other_arg < arg)) {  // a tie goes to the smaller index
            best = other;
            arg = other_arg;
        }
    }
    if (lane == 0 && arg == labels[row]) atomicAdd(correct, 1);
}

extern "C" int count_correct(const float* logits, const long long* labels, int* correct, int M, int C,
                             cudaStream_t stream) {
    cudaMemsetAsync(correct, 0, sizeof(int), stream);  // the count starts at 0, in stream order with the launch
    count_correct_kernel<<<(M + WARPS - 1) / WARPS, WARPS * 32, 0, stream>>>(logits, labels, correct, M, C);
    return (int)cudaGetLastError();
}
