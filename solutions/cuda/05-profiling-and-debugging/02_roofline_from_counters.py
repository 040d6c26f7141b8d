"""Solutions to the exercises of cuda/05-profiling-and-debugging/02_roofline_from_counters.ipynb (graded by
gpu_ml.exercises)."""

import math


# Exercise 1: the counters count instructions executed by threads with their predicate on. An FFMA is a multiply and
# an add, 2 FLOPs; FADD and FMUL are 1. The tensor-core counters already count operations (2 per multiply-add).
# Instruction counts (sm__inst_executed_pipe_tensor_...) are not FLOPs: leave them out.
def counted_flops(row):
    return (2 * row["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"]
            + row["smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"]
            + row["smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"]
            + row["sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off.sum"]
            + row["sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum"])


# Exercise 2: intensity = FLOPs / bytes; the roof at that intensity is the lower of the compute peak and
# bandwidth x intensity (GB/s x FLOP/byte = GFLOP/s: divide by 1000 for TFLOP/s).
def roof_distance(flops, nbytes, seconds, peak_tflops, bandwidth_gbs):
    intensity = flops / nbytes
    achieved = flops / seconds / 1e12
    attainable = min(peak_tflops, bandwidth_gbs * intensity / 1e3)
    return intensity, achieved, attainable, achieved / attainable


# Exercise 3: the blocks of one row of C tiles all read the same BM rows of A, and there are ceil(N / BN) tiles in a
# row: without the L2, A comes from DRAM ceil(N / BN) times and B ceil(M / BM) times. C is written once.
def tiled_matmul_bytes(M, N, K, BM, BN, elem):
    return elem * (M * K * math.ceil(N / BN) + K * N * math.ceil(M / BM) + M * N)
