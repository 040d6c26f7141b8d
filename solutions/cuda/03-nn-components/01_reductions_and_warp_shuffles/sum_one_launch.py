"""CPU stand-in for sum_one_launch.cu (what the kernel writes, for tests/test_exercises.py): the sum of x in out[0],
the counter left at 0."""


def sum_one_launch(x, partials, counter, out, n):
    out[0] = x[:n].double().sum().float()
    counter[0] = 0
    return 0
