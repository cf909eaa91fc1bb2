"""The measuring layer: the only part of perfgate that imports torch.

``loop`` runs one repeat in-process, ``worker`` is the per-repeat process, ``runner``
orchestrates repeats, ``clock`` does the phase bookkeeping, ``fingerprint`` collects the
environment, ``loader`` and ``datasets`` are what workload builders use.
"""
