// cudaling: affine_2d
__global__ void affine_2d_kernel(const float* x, const float* row_scale, const float* col_shift, float* out,
                                 int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;  // x: the contiguous dimension
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        int i = row * cols + col;  // row-major: a row is cols elements long
        out[i] = x[i] * row_scale[row] + col_shift[col];
    }
}

extern "C" int affine_2d(const float* x, const float* row_scale, const float* col_shift, float* out, int rows,
                         int cols) {
    dim3 block(16, 16);
    dim3 grid((cols + block.x - 1) / block.x, (rows + block.y - 1) / block.y);
    affine_2d_kernel<<<grid, block>>>(x, row_scale, col_shift, out, rows, cols);
    return (int)cudaGetLastError();
}
