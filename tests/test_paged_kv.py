"""gpu_ml.kernels.triton.paged_kv (triton/07-llm-inference/01): the block allocator against a contiguous reference,
and every refusal."""

from __future__ import annotations

import random

import pytest
import torch

from gpu_ml.kernels.triton.paged_kv import PagedKVCache


def _kv(n: int, heads: int = 2, d: int = 3, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(n, heads, d).to(dtype)


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_random_workload_matches_a_contiguous_reference(block_size):
    rng, cache, ref = random.Random(block_size), PagedKVCache(40, block_size, 2, 3, dtype=torch.float32), {}
    rng.shuffle(cache.free)
    for step in range(300):
        live, op = sorted(cache.tables, key=str), rng.random()
        if op < 0.15 or not live:
            cache.add(step)
            ref[step] = (_kv(0), _kv(0))
        elif op < 0.25:
            parent = rng.choice(live)
            cache.fork(parent, f"{parent}/{step}")
            ref[f"{parent}/{step}"] = ref[parent]
        elif op < 0.35:
            seq = rng.choice(live)
            cache.free_sequence(seq)
            del ref[seq]
        else:
            seq, k = rng.choice(live), _kv(rng.randint(0, 2 * block_size + 1))
            v = _kv(len(k))
            try:
                cache.append(seq, k, v)
            except MemoryError:
                continue
            ref[seq] = (torch.cat([ref[seq][0], k]), torch.cat([ref[seq][1], v]))
        for seq in cache.tables:
            k, v = cache.gather(seq)
            assert torch.equal(k, ref[seq][0]) and torch.equal(v, ref[seq][1]), (step, seq)
            assert len(cache.tables[seq]) == -(-cache.lengths[seq] // block_size)
        held = [b for t in cache.tables.values() for b in t]
        assert [cache.refs[b] for b in range(40)] == [held.count(b) for b in range(40)]
        assert sorted(cache.free) == [b for b in range(40) if b not in held]


def test_copy_on_write_copies_only_a_shared_partly_filled_block():
    cache = PagedKVCache(8, 4, 1, 1)
    cache.add("p")
    cache.append("p", torch.ones(6, 1, 1, dtype=torch.float16), torch.ones(6, 1, 1, dtype=torch.float16))
    cache.fork("p", "c")
    assert cache.tables["c"] == cache.tables["p"] and cache.blocks_in_use() == 2
    cache.append("c", torch.zeros(1, 1, 1, dtype=torch.float16), torch.zeros(1, 1, 1, dtype=torch.float16))
    assert cache.tables["c"][0] == cache.tables["p"][0] and cache.tables["c"][1] != cache.tables["p"][1]
    assert cache.gather("p")[0].flatten().tolist() == [1] * 6  # the parent's block was not written
    assert cache.gather("c")[0].flatten().tolist() == [1] * 6 + [0]
    cache.free_sequence("p")
    assert cache.blocks_in_use() == 2  # c's two blocks; the parent's copy of the last block went back


def test_block_tables_and_slots():
    cache = PagedKVCache(6, 2, 1, 1)
    cache.free = [0, 5, 1, 4]  # pop() hands out 4, 1, 5, 0
    for seq, n in (("a", 3), ("b", 1)):
        cache.add(seq)
        cache.append(seq, _kv(n, 1, 1, torch.float16), _kv(n, 1, 1, torch.float16))
    tables, lengths = cache.block_tables(["a", "b"])
    assert tables.tolist() == [[4, 1], [5, -1]] and lengths.tolist() == [3, 1] and tables.dtype == torch.int32
    assert cache.slots("a").tolist() == [8, 9, 2] and cache.slots("a", 1, 3).tolist() == [9, 2]
    assert cache.bytes_per_block == 2 * 2 * 1 * 1 * 2
    assert cache.block_tables([])[0].shape == (0, 0)


def test_refusals_leave_the_cache_as_it_was():
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        PagedKVCache(4, 0, 1, 1)
    with pytest.raises(ValueError, match="num_blocks must be a positive int"):
        PagedKVCache(2.5, 4, 1, 1)
    cache = PagedKVCache(2, 4, 2, 3, dtype=torch.float32)
    cache.add("a")
    with pytest.raises(ValueError, match="already in the cache"):
        cache.add("a")
    with pytest.raises(KeyError, match="no sequence 'x'"):
        cache.append("x", _kv(1), _kv(1))
    with pytest.raises(KeyError, match="no sequence 'x'"):
        cache.fork("x", "y")
    with pytest.raises(KeyError, match="no sequence 'x'"):
        cache.free_sequence("x")
    for k, v in ((_kv(2, 3), _kv(2, 3)), (_kv(2), _kv(3)), (_kv(2, dtype=torch.float16), _kv(2, dtype=torch.float16)),
                 (_kv(2), torch.empty(2, 2, 3, device="meta"))):
        with pytest.raises(ValueError, match=r"k and v must both be \[n, 2, 3\] torch.float32 on cpu"):
            cache.append("a", k, v)
    cache.append("a", _kv(6), _kv(6))
    cache.fork("a", "b")
    with pytest.raises(ValueError, match="already in the cache"):
        cache.fork("a", "b")
    with pytest.raises(MemoryError, match="needs 1 more blocks, 0 are free"):  # b would copy the shared last block
        cache.append("b", _kv(1), _kv(1))
    with pytest.raises(MemoryError, match="needs 2 more blocks, 0 are free"):  # a copy and a new block
        cache.append("a", _kv(3), _kv(3))
    assert cache.lengths == {"a": 6, "b": 6} and cache.tables["a"] == cache.tables["b"] and cache.refs == [2, 2]
    cache.append("a", _kv(0), _kv(0))  # nothing to write: no copy, no block
    cache.free_sequence("a")
    cache.append("b", _kv(2), _kv(2))  # b alone holds its blocks now: it writes in place
    assert cache.lengths["b"] == 8 and cache.blocks_in_use() == 2
