// exercise: linear_grads_accumulate
#define TILE 16

// The parameter gradients of a ReLU layer y = relu(x @ W + b), ADDED to those of earlier micro-batches:
//   dZ = dY * (y > 0);   dW[i][j] += sum_b x[b][i] dZ[b][j];   db[j] += sum_b dZ[b][j].
// One thread per element (i, j) of dW [n_in, n_out]; the threads of row i = 0 also do db.
__global__ void linear_grads_kernel(const float* x, const float* dy, const float* y, float* dw, float* db, int batch,
                                    int n_in, int n_out) {
    const int j = blockIdx.x * TILE + threadIdx.x;  // output feature: a column of dW
    const int i = blockIdx.y * TILE + threadIdx.y;  // input feature: a row of dW
    if (i >= n_in || j >= n_out) return;
    float acc = 0.0f, col = 0.0f;
    for (int b = 0; b < batch; ++b) {
        const long long k = (long long)b * n_out + j;
        const float dz = y[k] > 0.0f ? dy[k] : 0.0f;  // ReLU's mask: no gradient where its output is 0
        acc += x[(long long)b * n_in + i] * dz;
        col += dz;
    }
    dw[(long long)i * n_out + j] += acc;  // +=: accumulate, do not overwrite
    if (i == 0) db[j] += col;
}

extern "C" int linear_grads_accumulate(const float* x, const float* dy, const float* y, float* dw, float* db,
                                       int batch, int n_in, int n_out, cudaStream_t stream) {
    dim3 block(TILE, TILE), grid((n_out + TILE - 1) / TILE, (n_in + TILE - 1) / TILE);
    linear_grads_kernel<<<grid, block, 0, stream>>>(x, dy, y, dw, db, batch, n_in, n_out);
    return (int)cudaGetLastError();
}
