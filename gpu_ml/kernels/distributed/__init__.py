"""Collectives of the multi-GPU track written with torch.distributed point-to-point messages, one module per lesson
(generated from the lessons' exported cells: do not edit). Run them in ranks started by gpu_ml.distributed.launch."""
