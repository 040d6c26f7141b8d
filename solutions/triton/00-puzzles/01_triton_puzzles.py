"""Solutions to the Triton puzzles (triton/00-puzzles/01_triton_puzzles.ipynb): one kernel per puzzle, with the
stub's name and signature. `python solutions/triton/00-puzzles/01_triton_puzzles.py` grades them all (on a CPU in
Triton's interpreter)."""

from gpu_ml import setup

setup(quiet=True)  # before any kernel is defined: on a CPU it switches Triton to its interpreter

import triton.language as tl  # noqa: E402

import triton  # noqa: E402


# 1. z[i] = x[i] + 10 with one program: the mask keeps lanes i >= N from reading or writing.
@triton.jit
def add_constant_kernel(x_ptr, z_ptr, N, B: tl.constexpr):
    offs = tl.arange(0, B)
    mask = offs < N
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(z_ptr + offs, x + 10.0, mask=mask)


# 2. z = x + y with one program per block of B elements.
@triton.jit
def add_vectors_kernel(x_ptr, y_ptr, z_ptr, N, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    mask = offs < N
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(z_ptr + offs, x + y, mask=mask)


# 3. z[i, j] = x[i] + y[j]: a column [BM, 1] plus a row [1, BN] broadcasts to a tile [BM, BN].
@triton.jit
def outer_add_kernel(x_ptr, y_ptr, z_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    i = tl.arange(0, BM)
    j = tl.arange(0, BN)
    x = tl.load(x_ptr + i, mask=i < M)
    y = tl.load(y_ptr + j, mask=j < N)
    mask = (i[:, None] < M) & (j[None, :] < N)
    tl.store(z_ptr + i[:, None] * N + j[None, :], x[:, None] + y[None, :], mask=mask)


# 4. The same over a 2-D grid: program (p, q) owns rows p*BM.. and columns q*BN..
@triton.jit
def outer_add_blocks_kernel(x_ptr, y_ptr, z_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    j = tl.program_id(1) * BN + tl.arange(0, BN)
    x = tl.load(x_ptr + i, mask=i < M)
    y = tl.load(y_ptr + j, mask=j < N)
    mask = (i[:, None] < M) & (j[None, :] < N)
    tl.store(z_ptr + i[:, None] * N + j[None, :], x[:, None] + y[None, :], mask=mask)


# 5. Element (i, j) of a matrix whose rows are `stride` elements apart is at ptr + i * stride + j.
@triton.jit
def add_matrices_kernel(x_ptr, y_ptr, z_ptr, M, N, stride_x, stride_y, stride_z, BM: tl.constexpr,
                        BN: tl.constexpr):
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    j = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (i[:, None] < M) & (j[None, :] < N)
    x = tl.load(x_ptr + i[:, None] * stride_x + j[None, :], mask=mask)
    y = tl.load(y_ptr + i[:, None] * stride_y + j[None, :], mask=mask)
    tl.store(z_ptr + i[:, None] * stride_z + j[None, :], x + y, mask=mask)


# 6. z = relu(x * y[None, :]), fused: one read of x and y, one write of z.
@triton.jit
def mul_relu_kernel(x_ptr, y_ptr, z_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    j = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (i[:, None] < M) & (j[None, :] < N)
    x = tl.load(x_ptr + i[:, None] * N + j[None, :], mask=mask)
    y = tl.load(y_ptr + j, mask=j < N)
    tl.store(z_ptr + i[:, None] * N + j[None, :], tl.maximum(x * y[None, :], 0.0), mask=mask)


# 7. One program per block of columns walks down all rows: dx tile by tile, dy summed in registers.
@triton.jit
def mul_relu_backward_kernel(x_ptr, y_ptr, dz_ptr, dx_ptr, dy_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    j = tl.program_id(0) * BN + tl.arange(0, BN)
    y = tl.load(y_ptr + j, mask=j < N)
    dy = tl.zeros((BN,), dtype=tl.float32)
    for start in range(0, M, BM):
        i = start + tl.arange(0, BM)
        mask = (i[:, None] < M) & (j[None, :] < N)
        offs = i[:, None] * N + j[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        dz = tl.load(dz_ptr + offs, mask=mask, other=0.0)
        g = tl.where(x * y[None, :] > 0, dz, 0.0)  # relu'(0) = 0
        tl.store(dx_ptr + offs, g * y[None, :], mask=mask)
        dy += tl.sum(g * x, axis=0)
    tl.store(dy_ptr + j, dy, mask=j < N)


# 8. A row longer than a block: add block after block into an accumulator; masked lanes read 0.
@triton.jit
def row_sum_kernel(x_ptr, z_ptr, M, N, B: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((B,), dtype=tl.float32)
    for start in range(0, N, B):
        offs = start + tl.arange(0, B)
        acc += tl.load(x_ptr + row * N + offs, mask=offs < N, other=0.0)
    tl.store(z_ptr + row, tl.sum(acc, axis=0))


# 9. The same with max: masked lanes must read -inf, the identity of max (0 would win on negative rows).
@triton.jit
def row_max_kernel(x_ptr, z_ptr, M, N, B: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.full((B,), float("-inf"), dtype=tl.float32)
    for start in range(0, N, B):
        offs = start + tl.arange(0, B)
        acc = tl.maximum(acc, tl.load(x_ptr + row * N + offs, mask=offs < N, other=float("-inf")))
    tl.store(z_ptr + row, tl.max(acc, axis=0))


# 10. tl.cumsum scans one block; the carry adds the sum of every block before it.
@triton.jit
def cumsum_kernel(x_ptr, z_ptr, M, N, B: tl.constexpr):
    row = tl.program_id(0)
    carry = 0.0
    for start in range(0, N, B):
        offs = start + tl.arange(0, B)
        x = tl.load(x_ptr + row * N + offs, mask=offs < N, other=0.0)
        tl.store(z_ptr + row * N + offs, carry + tl.cumsum(x, axis=0), mask=offs < N)
        carry += tl.sum(x, axis=0)


# 11. The row fits one block: subtract the max before exp (no overflow); padding lanes read -inf, exp gives 0.
@triton.jit
def softmax_kernel(x_ptr, z_ptr, M, N, B: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, B)
    x = tl.load(x_ptr + row * N + offs, mask=offs < N, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(z_ptr + row * N + offs, e / tl.sum(e, axis=0), mask=offs < N)


# 12. Mean and biased variance over the N real lanes only: padding is zeroed before it is squared.
@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, z_ptr, M, N, eps, B: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, B)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
    w = tl.load(w_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(z_ptr + row * N + offs, xc * rstd * w + b, mask=mask)


# 13. Running max m and running sum denom (of exp(x - m)), rescaled when m grows; while m is still -inf, the
# rescale factor exp(m - m_new) would be exp(-inf - -inf) = NaN, so the kernel subtracts 0 instead.
@triton.jit
def logsumexp_kernel(x_ptr, z_ptr, M, N, B: tl.constexpr):
    row = tl.program_id(0)
    m = float("-inf")
    denom = 0.0
    for start in range(0, N, B):
        offs = start + tl.arange(0, B)
        x = tl.load(x_ptr + row * N + offs, mask=offs < N, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        denom = denom * tl.exp(m - safe) + tl.sum(tl.exp(x - safe), axis=0)
        m = m_new
    tl.store(z_ptr + row, m + tl.log(denom))


# 14. Pass 1 as in logsumexp; pass 2 re-reads the row and writes exp(x - m) / denom.
@triton.jit
def softmax_long_kernel(x_ptr, z_ptr, M, N, B: tl.constexpr):
    row = tl.program_id(0)
    m = float("-inf")
    denom = 0.0
    for start in range(0, N, B):
        offs = start + tl.arange(0, B)
        x = tl.load(x_ptr + row * N + offs, mask=offs < N, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        denom = denom * tl.exp(m - safe) + tl.sum(tl.exp(x - safe), axis=0)
        m = m_new
    for start in range(0, N, B):
        offs = start + tl.arange(0, B)
        x = tl.load(x_ptr + row * N + offs, mask=offs < N, other=float("-inf"))
        tl.store(z_ptr + row * N + offs, tl.exp(x - m) / denom, mask=offs < N)


# 15. Each program owns BQ queries; per key block: scores [BQ, BK], online max/sum per query, and the
# accumulator of sum p * v rescaled like denom.
@triton.jit
def attention_scalar_kernel(q_ptr, k_ptr, v_ptr, z_ptr, T, BQ: tl.constexpr, BK: tl.constexpr):
    i = tl.program_id(0) * BQ + tl.arange(0, BQ)
    q = tl.load(q_ptr + i, mask=i < T, other=0.0)
    m = tl.full((BQ,), float("-inf"), dtype=tl.float32)
    denom = tl.zeros((BQ,), dtype=tl.float32)
    acc = tl.zeros((BQ,), dtype=tl.float32)
    for start in range(0, T, BK):
        j = start + tl.arange(0, BK)
        k = tl.load(k_ptr + j, mask=j < T, other=0.0)
        v = tl.load(v_ptr + j, mask=j < T, other=0.0)
        s = tl.where(j[None, :] < T, q[:, None] * k[None, :], float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # finite: every block has one real key
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha + tl.sum(p * v[None, :], axis=1)
        m = m_new
    tl.store(z_ptr + i, acc / denom, mask=i < T)


# 16. One tile of outputs; for each of the KH x KW taps, a shifted tile of x (0 past the edges) times w[a, b].
@triton.jit
def conv2d_kernel(x_ptr, w_ptr, z_ptr, H, W, KH: tl.constexpr, KW: tl.constexpr, BH: tl.constexpr,
                  BW: tl.constexpr):
    i = tl.program_id(0) * BH + tl.arange(0, BH)
    j = tl.program_id(1) * BW + tl.arange(0, BW)
    acc = tl.zeros((BH, BW), dtype=tl.float32)
    for a in tl.static_range(KH):
        for b in tl.static_range(KW):
            w = tl.load(w_ptr + a * KW + b)
            r = i[:, None] + a
            c = j[None, :] + b
            acc += w * tl.load(x_ptr + r * W + c, mask=(r < H) & (c < W), other=0.0)
    tl.store(z_ptr + i[:, None] * W + j[None, :], acc, mask=(i[:, None] < H) & (j[None, :] < W))


# 17. BM rows per program; a [BM, BK] tile of a times a block of x, summed along K, block after block.
@triton.jit
def matvec_kernel(a_ptr, x_ptr, z_ptr, M, K, BM: tl.constexpr, BK: tl.constexpr):
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    acc = tl.zeros((BM,), dtype=tl.float32)
    for start in range(0, K, BK):
        k = start + tl.arange(0, BK)
        a = tl.load(a_ptr + i[:, None] * K + k[None, :], mask=(i[:, None] < M) & (k[None, :] < K), other=0.0)
        x = tl.load(x_ptr + k, mask=k < K, other=0.0)
        acc += tl.sum(a * x[None, :], axis=1)
    tl.store(z_ptr + i, acc, mask=i < M)


# 18. Column j lives in byte j // 2 of its row, in the low nibble if j is even, else the high one.
@triton.jit
def dequantize_int4_kernel(q_ptr, s_ptr, z_ptr, M, N, G: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    j = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (i[:, None] < M) & (j[None, :] < N)
    byte = tl.load(q_ptr + i[:, None] * (N // 2) + j[None, :] // 2, mask=mask, other=0)
    nibble = (byte >> ((j[None, :] % 2) * 4)) & 0xF
    scale = tl.load(s_ptr + i[:, None] * (N // G) + j[None, :] // G, mask=mask, other=0.0)
    tl.store(z_ptr + i[:, None] * N + j[None, :], (nibble.to(tl.float32) - 8.0) * scale, mask=mask)


# 19. The weights are dequantized in registers, block by block, and never written out.
@triton.jit
def int4_matvec_kernel(q_ptr, s_ptr, x_ptr, z_ptr, M, N, G: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    acc = tl.zeros((BM,), dtype=tl.float32)
    for start in range(0, N, BN):
        j = start + tl.arange(0, BN)
        mask = (i[:, None] < M) & (j[None, :] < N)
        byte = tl.load(q_ptr + i[:, None] * (N // 2) + j[None, :] // 2, mask=mask, other=0)
        nibble = (byte >> ((j[None, :] % 2) * 4)) & 0xF
        scale = tl.load(s_ptr + i[:, None] * (N // G) + j[None, :] // G, mask=mask, other=0.0)
        x = tl.load(x_ptr + j, mask=j < N, other=0.0)
        acc += tl.sum((nibble.to(tl.float32) - 8.0) * scale * x[None, :], axis=1)
    tl.store(z_ptr + i, acc, mask=i < M)


# 20. A [BM, BN] tile of c accumulates tl.dot of [BM, BK] and [BK, BN] tiles along K, in fp32.
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    j = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for start in range(0, K, BK):
        k = start + tl.arange(0, BK)
        a = tl.load(a_ptr + i[:, None] * K + k[None, :], mask=(i[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * N + j[None, :], mask=(k[:, None] < K) & (j[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + i[:, None] * N + j[None, :], acc, mask=(i[:, None] < M) & (j[None, :] < N))


# 21. Grid axis 2 picks the matrix of the batch: move every pointer to its start, then matmul as before.
@triton.jit
def batched_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    batch = tl.program_id(2)
    a_ptr += batch * M * K
    b_ptr += batch * K * N
    c_ptr += batch * M * N
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    j = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for start in range(0, K, BK):
        k = start + tl.arange(0, BK)
        a = tl.load(a_ptr + i[:, None] * K + k[None, :], mask=(i[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * N + j[None, :], mask=(k[:, None] < K) & (j[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + i[:, None] * N + j[None, :], acc, mask=(i[:, None] < M) & (j[None, :] < N))


# 22. The epilogue works on the accumulator in registers: + bias, relu, then one store.
@triton.jit
def matmul_bias_relu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                            BK: tl.constexpr):
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    j = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for start in range(0, K, BK):
        k = start + tl.arange(0, BK)
        a = tl.load(a_ptr + i[:, None] * K + k[None, :], mask=(i[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * N + j[None, :], mask=(k[:, None] < K) & (j[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    bias = tl.load(bias_ptr + j, mask=j < N, other=0.0)
    acc = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(c_ptr + i[:, None] * N + j[None, :], acc, mask=(i[:, None] < M) & (j[None, :] < N))


# 23. Puzzle 15 with vectors: s = q k^T by tl.dot, the online softmax per query row, acc += p v. Causal: keys
# past the last query of the block are never loaded, and s = -inf above the diagonal.
@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, T, scale, D: tl.constexpr, CAUSAL: tl.constexpr,
                           BQ: tl.constexpr, BK: tl.constexpr):
    i = tl.program_id(0) * BQ + tl.arange(0, BQ)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + i[:, None] * D + d[None, :], mask=i[:, None] < T, other=0.0)
    m = tl.full((BQ,), float("-inf"), dtype=tl.float32)
    denom = tl.zeros((BQ,), dtype=tl.float32)
    acc = tl.zeros((BQ, D), dtype=tl.float32)
    end = tl.minimum(T, (tl.program_id(0) + 1) * BQ) if CAUSAL else T
    for start in range(0, end, BK):
        j = start + tl.arange(0, BK)
        k = tl.load(k_ptr + j[:, None] * D + d[None, :], mask=j[:, None] < T, other=0.0)
        v = tl.load(v_ptr + j[:, None] * D + d[None, :], mask=j[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        keep = j[None, :] < T
        if CAUSAL:
            keep = keep & (j[None, :] <= i[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # finite: key `start` is kept for every query (start <= i)
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(o_ptr + i[:, None] * D + d[None, :], acc / denom[:, None], mask=i[:, None] < T)


if __name__ == "__main__":
    from gpu_ml.puzzles import progress

    progress(globals())
