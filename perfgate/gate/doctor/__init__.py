"""The checks of ``perfgate doctor``: is this machine fit to gate?

Each check is a small function that returns a :class:`~perfgate.gate.doctor.card.Check`
(name, status, detail, advice); :func:`~perfgate.gate.doctor.diagnosis.diagnose` runs them
into a :class:`~perfgate.gate.doctor.card.Card`, which the command
(:mod:`perfgate.adapters.doctor`) prints.

- :mod:`~perfgate.gate.doctor.card`: the statuses, a check's line, the card, and the guard
  that turns a question that could not be asked into an ``unknown`` line.
- :mod:`~perfgate.gate.doctor.cpu_disk`: on every machine, the CPU frequency governor, the
  CPUs, the load other processes put on them for a second, and the free disk for the data
  cache.
- :mod:`~perfgate.gate.doctor.gpu`: on a GPU, the driver against the CUDA the installed
  torch is built for, persistence mode, the graphics clocks (what the runner declared in
  ``PERFGATE_GPU_CLOCKS``, what NVML reads, whether sudo would let the workflow lock them),
  other processes on the GPU, clock-event (throttle) reasons at idle, ECC, the PCIe link,
  and the judging of the micro-run on CUDA: the CUDA event time of the steps against the
  wall time of the window, and no synchronisation inside it.
- :mod:`~perfgate.gate.doctor.diagnosis`: running them: the micro-run in its own process
  (:mod:`perfgate.measure.probe`), the card for a device, and why CUDA cannot be used here.

Nothing here imports torch: the torch and NVML calls are in ``perfgate.measure.probe``,
and every check takes what they return (or a fake of it) as an argument.
"""
