// exercise: transpose_batched
constexpr int TILE = 32;  // a TILE x TILE tile per block
constexpr int ROWS = 8;   // blockDim = (TILE, ROWS): each thread moves TILE / ROWS = 4 elements

// out[b] (cols x rows) = in[b] (rows x cols) transposed, for each matrix b = blockIdx.z of the batch.
__global__ void transpose_batched_kernel(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];  // padded: a column of the tile spans all 32 banks
    const size_t matrix = (size_t)rows * cols;  // elements per matrix, in and out alike
    in += blockIdx.z * matrix;
    out += blockIdx.z * matrix;
    int c = blockIdx.x * TILE + threadIdx.x;  // input column
    int r = blockIdx.y * TILE + threadIdx.y;  // input row
    for (int j = 0; j < TILE; j += ROWS)  // coalesced reads along input rows
        if (r + j < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(r + j) * cols + c];
    __syncthreads();  // the whole tile is loaded before anyone reads it
    c = blockIdx.y * TILE + threadIdx.x;  // output column = input row
    r = blockIdx.x * TILE + threadIdx.y;  // output row = input column
    for (int j = 0; j < TILE; j += ROWS)  // coalesced writes along output rows
        if (r + j < cols && c < rows) out[(size_t)(r + j) * rows + c] = tile[threadIdx.x][threadIdx.y + j];
}

extern "C" int transpose_batched(const float* in, float* out, int batch, int rows, int cols) {
    dim3 block(TILE, ROWS);
    dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE, batch);  // one z-slice of tiles per matrix
    transpose_batched_kernel<<<grid, block>>>(in, out, rows, cols);
    return (int)cudaGetLastError();
}
