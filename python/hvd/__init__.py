"""hvdrun's Python packages: hvd.torch is Horovod's PyTorch API on libhvd.

`import hvd.torch as hvd` (the project's name) and `import horovod.torch as hvd` (a compatibility
layer for Horovod scripts) are the same module. See docs/pytorch.md, "Horovod scripts".
"""
__version__ = '0.1.0'
