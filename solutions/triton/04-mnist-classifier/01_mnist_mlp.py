"""Solutions to the exercises of triton/04-mnist-classifier/01_mnist_mlp.ipynb (graded by gpu_ml.exercises)."""

import triton.language as tl

import triton


# Exercise 1: Adam over one flat buffer, one launch. The bias corrections 1 - beta^t depend only on the step, so the
# host computes them once per step and passes them as floats. eps goes after the bias-corrected square root, as
# torch.optim.Adam puts it: p -= lr * m_hat / (sqrt(v_hat) + eps).
@triton.jit
def adam_kernel(p_ptr, g_ptr, m_ptr, v_ptr, n, lr, beta1, beta2, eps, correction1, correction2,
                BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    g = tl.load(g_ptr + offs, mask=ok)
    m = beta1 * tl.load(m_ptr + offs, mask=ok) + (1 - beta1) * g
    v = beta2 * tl.load(v_ptr + offs, mask=ok) + (1 - beta2) * g * g
    tl.store(m_ptr + offs, m, mask=ok)
    tl.store(v_ptr + offs, v, mask=ok)
    update = lr * (m / correction1) / (tl.sqrt(v / correction2) + eps)
    tl.store(p_ptr + offs, tl.load(p_ptr + offs, mask=ok) - update, mask=ok)


def adam_step(p, g, m, v, step, lr, beta1, beta2, eps):
    n, block = p.numel(), 1024
    adam_kernel[(triton.cdiv(n, block),)](p, g, m, v, n, lr, beta1, beta2, eps, 1 - beta1**step, 1 - beta2**step,
                                          BLOCK=block)


# Exercise 2: dW += x^T dZ and db += colsum(dZ), dZ = dy * (y > 0) formed as dy is loaded. The column sums are the
# same in every tile row (pid_k): only the first adds them into db, or db would get them K / BLOCK_K times.
@triton.jit
def linear_grads_kernel(x_ptr, dy_ptr, y_ptr, dw_ptr, db_ptr, B, K, N, stride_xb, stride_xk, stride_yb, stride_yn,
                        BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_B: tl.constexpr):
    pid_k, pid_n = tl.program_id(0), tl.program_id(1)
    rk = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_K, BLOCK_N], dtype=tl.float32)
    col = tl.zeros([BLOCK_N], dtype=tl.float32)
    for b0 in range(0, B, BLOCK_B):
        rb = b0 + tl.arange(0, BLOCK_B)
        xt = tl.load(x_ptr + rb[None, :] * stride_xb + rk[:, None] * stride_xk,
                     mask=(rb[None, :] < B) & (rk[:, None] < K), other=0.0)
        dz_ok = (rb[:, None] < B) & (rn[None, :] < N)
        dz_offs = rb[:, None] * stride_yb + rn[None, :] * stride_yn
        dz = tl.load(dy_ptr + dz_offs, mask=dz_ok, other=0.0)
        dz = tl.where(tl.load(y_ptr + dz_offs, mask=dz_ok, other=0.0) > 0, dz, 0.0)  # ReLU's gradient
        acc = tl.dot(xt, dz, acc, input_precision="ieee")
        col += tl.sum(dz, axis=0)
    out_ok = (rk[:, None] < K) & (rn[None, :] < N)
    dw_ptrs = dw_ptr + rk[:, None] * N + rn[None, :]
    tl.store(dw_ptrs, tl.load(dw_ptrs, mask=out_ok, other=0.0) + acc, mask=out_ok)
    if pid_k == 0:
        db = tl.load(db_ptr + rn, mask=rn < N, other=0.0)
        tl.store(db_ptr + rn, db + col, mask=rn < N)


def linear_grads_(x, dy, y, dw, db):
    (B, K), N = x.shape, dy.shape[1]
    grid = (triton.cdiv(K, 32), triton.cdiv(N, 32))
    linear_grads_kernel[grid](x, dy, y, dw, db, B, K, N, *x.stride(), *dy.stride(), BLOCK_K=32, BLOCK_N=32,
                              BLOCK_B=16)
    return dw, db
