"""Shared test set-up: keep TensorFlow quiet and small so the suite fits CI's budget."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# On a GPU (the gpu tier): memory as needed, not the whole GPU at the first op, so that the
# subprocesses a test starts (checkpoints written on the GPU, training runs) find memory too.
# TensorFlow reads the variable when it first uses the GPU; subprocesses inherit it.
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
