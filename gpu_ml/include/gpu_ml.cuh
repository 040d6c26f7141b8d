// gpu_ml.cuh: the helpers the CUDA track's kernels share, one name each. `%%cuda` cells find it on their
// include path (#include "gpu_ml.cuh"); the lessons that teach a helper still write it out in their cells.
// The kernels lessons export are on that path too: #include "cuda/softmax_warp.cuh" (gpu_ml/kernels/cuda).
//   CHECK(call)                       abort with file, line and CUDA's message when a runtime call fails
//   to_float(x), from_float<T>(v)     fp32 <-> float / __half / __nv_bfloat16
//   Pack<T, VEC>, load_pack, store_pack   16-byte (or VEC-element) vector loads and stores, converted to fp32
//   warp_sum, warp_max                butterfly (__shfl_xor_sync) reductions: every lane gets the result
//   block_sum, block_max              the same over a block (red: 32 floats of shared memory)
//   online_merge(m, s, m2, s2)        merge two (maximum, sum of exp(x - maximum)) pairs, -inf safe
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef CHECK
#define CHECK(call)                                                                   \
    do {                                                                              \
        cudaError_t err_ = (call);                                                    \
        if (err_ != cudaSuccess) {                                                    \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, \
                    cudaGetErrorName(err_), cudaGetErrorString(err_));                \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)
#endif

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// VEC elements of T read or written as one access: the pointer must be aligned to sizeof(T) * VEC.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ void load_pack(const T* p, float (&out)[VEC]) {
    Pack<T, VEC> pack = *reinterpret_cast<const Pack<T, VEC>*>(p);
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = to_float(pack.v[j]);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_pack(T* p, const float (&in)[VEC]) {
    Pack<T, VEC> pack;
#pragma unroll
    for (int j = 0; j < VEC; ++j) pack.v[j] = from_float<T>(in[j]);
    *reinterpret_cast<Pack<T, VEC>*>(p) = pack;
}

// Every lane of a full warp must call these (the mask is all 32 lanes).
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Every thread of the block must call these, with blockDim.x a multiple of 32; the result is in every thread.
// The first __syncthreads() keeps a second reduction from overwriting `red` while the first still reads it.
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_sum(lane < blockDim.x / 32 ? red[lane] : 0.0f);
}
__device__ __forceinline__ float block_max(float v, float* red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_max(lane < blockDim.x / 32 ? red[lane] : -INFINITY);
}

// (m, s) <- the pair for the union of both sets; a pair with m = -inf is empty (or all -inf) and adds nothing.
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    if (mn == -INFINITY) return;  // both empty: exp(-inf - -inf) would be NaN
    s = s * __expf(m - mn) + s2 * __expf(m2 - mn);
    m = mn;
}
