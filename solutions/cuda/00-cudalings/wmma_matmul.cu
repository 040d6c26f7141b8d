// cudaling: wmma_matmul
#include <mma.h>
using namespace nvcuda;

__global__ void wmma_kernel(const half* a, const half* b, float* c, int n, int k) {
    const int tm = blockIdx.y, tn = blockIdx.x;  // this warp's 16 x 16 tile of c
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < k; k0 += 16) {
        wmma::load_matrix_sync(fa, a + (size_t)tm * 16 * k + k0, k);  // leading dimension: a row of a is k long
        wmma::load_matrix_sync(fb, b + (size_t)k0 * n + tn * 16, n);
        wmma::mma_sync(acc, fa, fb, acc);  // acc += fa @ fb on the tensor cores
    }
    wmma::store_matrix_sync(c + (size_t)tm * 16 * n + tn * 16, acc, n, wmma::mem_row_major);
}

extern "C" int wmma_matmul(const half* a, const half* b, float* c, int m, int n, int k) {  // multiples of 16
    wmma_kernel<<<dim3(n / 16, m / 16), 32>>>(a, b, c, n, k);  // one warp per tile of c
    return (int)cudaGetLastError();
}
