"""GPT-OSS's MXFP4 experts kept in their checkpoint format (`model.mxfp4=native`) or dequantized (`dequantize`).

codec       the format: dequantize / quantize / random draws (bit-equal to transformers' dequantization)
experts     `to_native(model)`: blocks and scales as buffers, the routed experts dequantized on the fly in the
            forward and the backward, dispatched through transformers' ExpertsInterface
checkpoint  real-format checkpoints (`*_blocks` / `*_scales` + quantization_config): written by `save`, loaded
            natively by `load_native` (no hub kernels) or dequantized by transformers' own Mxfp4Config
"""
