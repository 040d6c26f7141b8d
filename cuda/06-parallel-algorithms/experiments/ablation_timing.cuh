// The timing of the ablation programs beside it: mean milliseconds of 50 launches of f after 5 warm-up launches,
// between two CUDA events on the default stream.
#pragma once
#include <cuda_runtime.h>

template <class F>
float timed(F f) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 5; ++i) f();
    cudaEventRecord(a);
    for (int i = 0; i < 50; ++i) f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / 50;
}
