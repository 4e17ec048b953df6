"""hpctrain: distributed deep-learning training from one machine to a cluster.

The Python package holds hpctrain.torch: Horovod's API (``import
hpctrain.torch as hvd``) and the "hpctrain" torch.distributed backend, over
the same C++ engine as hpctrain's own training. See docs/python.md.
"""
