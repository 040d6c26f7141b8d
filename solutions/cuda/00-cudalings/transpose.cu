// cudaling: transpose
#define TILE 32
#define ROWS 8  // a block is TILE x ROWS threads; each thread moves TILE / ROWS elements

__global__ void transpose_kernel(const float* x, float* out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];  // padded: conflict-free column reads
    const int tx = threadIdx.x;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;  // this block's tile of x
    for (int j = threadIdx.y; j < TILE; j += ROWS) {  // read rows of x: coalesced
        const int r = r0 + j, c = c0 + tx;
        if (r < rows && c < cols) tile[j][tx] = x[(size_t)r * cols + c];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < TILE; j += ROWS) {  // write rows of out (columns of x): coalesced
        const int orow = c0 + j, ocol = r0 + tx;  // out is cols x rows; out[orow][ocol] = x[ocol][orow]
        if (orow < cols && ocol < rows) out[(size_t)orow * rows + ocol] = tile[tx][j];
    }
}

extern "C" int transpose(const float* x, float* out, int rows, int cols) {
    dim3 block(TILE, ROWS);
    dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    transpose_kernel<<<grid, block>>>(x, out, rows, cols);
    return (int)cudaGetLastError();
}
