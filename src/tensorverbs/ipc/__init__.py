"""Tensors passed by handle between the tasks of one host (CUDA IPC): see
:mod:`tensorverbs.ipc.shared_tensors`."""
