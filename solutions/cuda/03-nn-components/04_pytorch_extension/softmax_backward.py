"""CPU stand-in for softmax_backward.cu: writes dx as the kernel does, returns 0."""


def softmax_backward(y, dy, dx, rows, cols):
    y, dy = y.view(rows, cols), dy.view(rows, cols)
    dx[: rows * cols] = (y * (dy - (dy * y).sum(1, keepdim=True))).flatten()
    return 0
