"""The features built on the kernel, one package each."""
