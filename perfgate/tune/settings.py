"""The DataLoader settings ``perfgate tune-loader`` varies: which to try, how to name them, which to skip.

A setting is the four values of :data:`LOADER_KEYS` as a plain dict. Stage 1 sweeps
``num_workers`` over :func:`worker_counts` with everything else as it is now; stage 2 varies
``pin_memory``, ``prefetch_factor`` and ``persistent_workers`` around the fastest of stage 1
(:func:`candidate_settings`). :func:`skip_reason` says which of those are not worth
measuring or are refused by the DataLoader, and why: ``prefetch_factor`` or
``persistent_workers`` with ``num_workers=0`` (the DataLoader refuses them), ``pin_memory``
off CUDA (it speeds up host-to-GPU copies and nothing else), ``persistent_workers`` when
the measured window never restarted the loader.

Two settings that build the same DataLoader (:func:`effective`) are measured once;
:func:`setting_key` keys a setting by its values as given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfgate.model.workload import Params

LOADER_KEYS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
"""The DataLoader settings the advisor varies (``batch_size`` is not one: it changes the model's work)."""

DEFAULT_PREFETCH = 2
"""torch's ``prefetch_factor`` when it is not given and ``num_workers > 0``."""

Setting = dict[str, Any]


def current_setting(params: Params) -> Setting:
    """The four loader settings ``params`` pin, as a plain dict."""
    return {k: getattr(params, k) for k in LOADER_KEYS}


def effective(setting: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the DataLoader is actually given: settings that build the same loader are equal.

    ``prefetch_factor`` and ``persistent_workers`` exist only for worker processes (perfgate
    leaves them out with ``num_workers=0``), and ``prefetch_factor=None`` means 2 there.
    """
    workers = int(setting["num_workers"])
    if workers == 0:
        return (0, bool(setting["pin_memory"]), None, False)
    prefetch = setting["prefetch_factor"] if setting["prefetch_factor"] is not None else DEFAULT_PREFETCH
    return (workers, bool(setting["pin_memory"]), prefetch, bool(setting["persistent_workers"]))


def value_text(value: Any) -> str:
    """A value as :func:`describe` and ``--set`` write it: ``true``/``false``, ``none``, or as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    return str(value)


def changed_keys(setting: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """Keys whose value differs from ``base``; with no workers only ``num_workers``/``pin_memory`` count."""
    keys = [k for k in LOADER_KEYS if setting[k] != base[k]]
    if int(setting["num_workers"]) == 0:
        keys = [k for k in keys if k in ("num_workers", "pin_memory")]
    return keys


def describe(setting: Mapping[str, Any], current: Mapping[str, Any] | None = None) -> str:
    """``num_workers=2 prefetch_factor=4``: the keys that differ from ``current`` (all keys without one)."""
    if current is None:
        keys = list(LOADER_KEYS)
        if int(setting["num_workers"]) == 0:
            keys = ["num_workers", "pin_memory"]
    else:
        keys = [k for k in LOADER_KEYS if setting[k] != current[k]]
        if not keys:
            return "current"
    return " ".join(f"{k}={value_text(setting[k])}" for k in keys)


def set_line(setting: Mapping[str, Any], current: Mapping[str, Any],
             overrides: Mapping[str, Any] | None = None) -> str:
    """The ``--set`` line that runs ``setting``: the user's own overrides with the changed keys on top."""
    merged: dict[str, Any] = dict(overrides or {})
    for key in changed_keys(setting, current):
        merged[key] = setting[key]
    if not merged:
        return ""
    return "--set " + " ".join(f"{k}={value_text(v)}" for k, v in merged.items())


def worker_counts(cores: int, current: int = 0) -> list[int]:
    """num_workers to sweep: 0 up to ``cores`` (all of them up to 8 cores, then 0, 1, 2, 4, ...,
    ``cores // 2`` and ``cores``), plus the current count, ascending."""
    if cores < 1:
        raise ValueError(f"cores must be at least 1, got {cores!r}")
    if cores <= 8:
        counts = set(range(cores + 1))
    else:
        counts = {0, cores // 2, cores}
        power = 1
        while power <= cores:
            counts.add(power)
            power *= 2
    counts.add(int(current))
    return sorted(counts)


def _stage1_priority(counts: Sequence[int], current: int, cores: int) -> list[int]:
    """The order in which worker counts are kept when the budget cannot hold them all:
    the current one, then about half and all of the cores (the usual advice), 1, 0, then the rest."""
    preferred = [current, max(1, cores // 2), cores, 1, 0]
    order = [c for c in dict.fromkeys(preferred) if c in counts]
    return order + [c for c in sorted(counts, reverse=True) if c not in order]


def candidate_settings(params: Params, device: str, cores: int, *,
                       around: Mapping[str, Any] | None = None) -> list[Setting]:
    """The settings to consider, most important first.

    Without ``around`` (stage 1): the current setting first, then ``num_workers`` over
    :func:`worker_counts` with everything else as it is now, in the order they are kept
    when the budget is short. With ``around`` (stage 2, the fastest setting of stage 1):
    ``pin_memory`` toggled, ``prefetch_factor`` 2 or 4 (the one it is not), then
    ``persistent_workers`` toggled. Some of these may not be worth measuring or may be
    refused by the DataLoader; :func:`skip_reason` says which and why. ``device`` does not
    prune here, so that what is skipped is listed with its reason.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    current = current_setting(params)
    if around is None:
        counts = worker_counts(cores, current["num_workers"])
        order = _stage1_priority(counts, current["num_workers"], cores)
        return [dict(current, num_workers=w) for w in order]
    base = {k: around[k] for k in LOADER_KEYS}
    out: list[Setting] = [dict(base, pin_memory=not base["pin_memory"])]
    prefetch = base["prefetch_factor"] if base["prefetch_factor"] is not None else DEFAULT_PREFETCH
    out += [dict(base, prefetch_factor=v) for v in (2, 4) if v != prefetch]
    out.append(dict(base, persistent_workers=not base["persistent_workers"]))
    return out


def skip_reason(setting: Mapping[str, Any], base: Mapping[str, Any], device: str, *,
                loader_restarted: bool = False) -> str | None:
    """Why ``setting`` (derived from ``base`` by changing a key or two) is not measured, or None.

    - the DataLoader refuses ``prefetch_factor`` and ``persistent_workers=True`` without
      worker processes (``num_workers=0``), and the other values change nothing there;
    - ``pin_memory`` only speeds up host-to-CUDA copies: on the CPU it would measure noise;
    - ``persistent_workers`` only keeps workers alive from one epoch to the next: if the
      measured window never restarted the loader it cannot change what is measured.
    """
    changed = [k for k in LOADER_KEYS if setting[k] != base[k]]
    if int(setting["num_workers"]) == 0:
        for key in ("prefetch_factor", "persistent_workers"):
            if key not in changed:
                continue
            value = setting[key]
            if (key == "prefetch_factor" and value is not None) or (key == "persistent_workers" and value):
                return (f"the DataLoader refuses {key}={value_text(value)} with num_workers=0 "
                        "(it applies to worker processes only)")
            return f"{key} applies to worker processes only: with num_workers=0 it changes nothing"
    if "pin_memory" in changed and device != "cuda":
        return (f"pin_memory only speeds up copies from the host to a CUDA device; on {device} "
                "it would measure noise, so it is not tried")
    if "persistent_workers" in changed and not loader_restarted:
        return ("persistent_workers only keeps the workers alive from one epoch to the next; the measured "
                "window never restarted the loader, so it cannot change this measurement (in a long run "
                "it saves the worker start-up once per epoch)")
    return None


def setting_key(setting: Mapping[str, Any]) -> tuple[Any, ...]:
    """The four values as given, in :data:`LOADER_KEYS` order: what a setting is kept by.

    Unlike :func:`effective` it tells apart settings that build the same DataLoader
    (``prefetch_factor=None`` and ``prefetch_factor=2`` with workers, say)."""
    return tuple(setting[k] for k in LOADER_KEYS)
