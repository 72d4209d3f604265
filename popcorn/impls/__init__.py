"""First-party Triton kernels (the ``popcorn`` backend), one module per op."""
