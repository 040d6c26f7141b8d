// exercise: index_3d
__global__ void index_3d_kernel(int* depth_of, int* row_of, int* col_of, int depth, int rows, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;  // x: columns, the contiguous axis
    const int r = blockIdx.y * blockDim.y + threadIdx.y;  // y: rows
    const int d = blockIdx.z * blockDim.z + threadIdx.z;  // z: depth
    if (d < depth && r < rows && c < cols) {  // the grid overhangs on every axis
        const int i = (d * rows + r) * cols + c;  // row-major depth x rows x cols
        depth_of[i] = d;
        row_of[i] = r;
        col_of[i] = c;
    }
}

extern "C" int index_3d(int* depth_of, int* row_of, int* col_of, int depth, int rows, int cols) {
    dim3 block(8, 8, 4);  // 256 threads: 8 columns x 8 rows x 4 planes
    dim3 grid((cols + block.x - 1) / block.x, (rows + block.y - 1) / block.y, (depth + block.z - 1) / block.z);
    index_3d_kernel<<<grid, block>>>(depth_of, row_of, col_of, depth, rows, cols);
    return (int)cudaGetLastError();
}
