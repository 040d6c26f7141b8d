"""Solutions to the exercises of triton/07-llm-inference/01_paged_kv_cache.ipynb (graded by gpu_ml.exercises)."""


# Exercise 1: each position's block from the table (a gather with a tensor of indices), times the block size, plus
# the offset inside the block.
def slot_mapping(block_table, positions, block_size):
    return block_table[positions // block_size] * block_size + positions % block_size


# Exercise 2: the prompt's full blocks are held once; each request owns the rest of its ceil(length / block) blocks
# (a request that writes past a prompt ending inside a block copies that block first, so it owns it too); requests
# that write nothing past such a prompt all keep sharing its last block, held once.
def shared_prefix_blocks(prefix_len, lengths, block_size):
    full = prefix_len // block_size
    shares_last = prefix_len % block_size > 0 and any(n == prefix_len for n in lengths)
    own = sum(-(-n // block_size) - full for n in lengths if n > prefix_len or prefix_len % block_size == 0)
    return full + own + shares_last
