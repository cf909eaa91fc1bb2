"""perfgate's reference workloads, installed as the ``perfgate_workloads`` package.

Each module defines :class:`perfgate.Workload` objects with the same public API a user's
own workload uses. Torch is imported inside the builders only, so listing workloads and
comparing results stay fast.
"""
