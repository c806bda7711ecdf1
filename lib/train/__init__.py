"""Training: the one loop (`loop.fit`), the checkpoint cache and its keys (`cache`), training processes on
pinned kernels and the scheduler (`processes`), and the fingerprint that guards a trainer's version."""
