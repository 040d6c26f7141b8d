"""CPU stand-in for linear_grads_accumulate.cu: adds the layer's dW and db into dw and db as the kernel does, returns
0."""


def linear_grads_accumulate(x, dy, y, dw, db, batch, n_in, n_out):
    dz = dy * (y > 0)  # ReLU's mask
    dw[: n_in * n_out] += (x.t() @ dz).flatten()
    db[:n_out] += dz.sum(0)
    return 0
