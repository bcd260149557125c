"""gfd doctor: walk the GPU stack bottom up and say which layer is broken."""
