//! Minimal kernels that prove each instruction family on the GPU against a CPU computation.
