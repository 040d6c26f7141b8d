"""CPU stand-in for table_lookup.cu (what the kernel writes, for tests/test_exercises.py): out[i] = table[idx[i]]
with the host's table[k] = 1 + k / 4."""


def table_lookup(idx, out, n, table_size):
    out[:n] = 1.0 + 0.25 * idx[:n].float()
    return 0
