"""The workload API asks only what it needs: defaults for everything but the batch size, an
optional input size and data declaration, and the public names in ``perfgate`` (imported on
first use, so that ``import perfgate`` stays without torch). Files written before the defaults
existed load and compare as they did (tests/fixtures/before_defaults, written by 4bfb192)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from factories import make_result

import perfgate
from perfgate import Built, DataSource, Params
from perfgate.analysis.compare import compare, incomparable
from perfgate.analysis.decide import GateConfig, Look
from perfgate.analysis.outcome import Entry
from perfgate.model.errors import UsageError
from perfgate.model.verdict import Verdict
from perfgate.model.workload import DEFAULT_STEPS, DEFAULT_WARMUP_STEPS, NOT_HASHED, apply_overrides
from perfgate.store.baselines import Lookup, load_baseline
from perfgate.store.results import load_result

BEFORE = Path(__file__).parent / "fixtures" / "before_defaults"


def test_only_the_batch_size_is_required() -> None:
    p = Params(batch_size=8)
    assert (p.input_size, p.warmup_steps, p.steps) == (None, DEFAULT_WARMUP_STEPS, DEFAULT_STEPS)
    assert (p.num_workers, p.pin_memory, p.prefetch_factor, p.precision) == (0, False, None, "fp32")
    assert "input_size" not in p.to_dict()  # unset: the result holds only what the workload set
    assert Params.from_dict(p.to_dict()) == p
    with pytest.raises(TypeError):
        Params()  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="input_size"):
        Params(batch_size=8, input_size=0)


def test_an_unset_input_size_can_still_be_set_and_unset_from_the_command_line() -> None:
    p = Params(batch_size=8)
    assert apply_overrides(p, {"input_size": "32"}).input_size == 32
    assert apply_overrides(Params(batch_size=8, input_size=32), {"input_size": "none"}) == p
    with pytest.raises(UsageError, match="input_size"):
        apply_overrides(p, {"input_size": "big"})


def test_a_baseline_written_before_the_defaults_compares_with_a_workload_that_relies_on_them() -> None:
    # The old workload spelled out batch_size=8, input_size=16, warmup_steps=10, steps=50;
    # the same workload now writes only what is not a default.
    baseline = load_baseline(BEFORE / "baseline-tiny.json")
    now = Params(batch_size=8, input_size=16).to_dict()
    assert now == dict(baseline.params)
    written = json.loads((BEFORE / "result-tiny.json").read_text())["params"]
    assert json.dumps(now, sort_keys=True) == json.dumps(written, sort_keys=True)  # as files write them
    result = make_result("tiny", repeats=3, seed=3, params=now)
    assert incomparable(result, baseline) == {}
    old = load_result(BEFORE / "result-tiny.json")
    assert incomparable(old, baseline) == {}
    outcome = compare([Entry("tiny", result, Lookup(baseline, BEFORE / "baseline-tiny.json"))], GateConfig(),
                      look=Look.single(3, "repeat"))
    assert outcome.comparisons[0].verdict not in (Verdict.INCOMPARABLE, Verdict.ERROR)


def test_the_reference_workloads_record_the_same_params_as_before() -> None:
    # Their definitions may be written more briefly; what they record must not change a byte.
    from perfgate.store.discovery import discover

    pinned = json.loads((BEFORE / "reference-params.json").read_text())
    registry = discover()
    for name, devices in pinned.items():
        for device, params in devices.items():
            assert json.dumps(registry.get(name).resolve(device).to_dict()) == json.dumps(params), (name, device)
    baseline = load_baseline(BEFORE / "baseline-resnet18-cifar10.json")
    assert dict(baseline.params) == registry.get("resnet18-cifar10").resolve("cpu").to_dict()
    # a real result of the reference workload, recorded on an H200 long before
    h200 = load_result(Path(__file__).parent / "fixtures" / "h200" / "resnet18-imagenette.json")
    assert dict(h200.params) == registry.get("resnet18-imagenette").resolve("cuda").to_dict()


def test_a_builder_may_leave_the_data_undeclared() -> None:
    class Loader:
        dataset = list(range(96))

    built = Built(model=None, optimizer=None, loss_fn=None, loader=Loader())
    assert isinstance(built.data, DataSource)
    assert (built.data.kind, built.data.content_hash, built.data.num_samples) == ("undeclared", NOT_HASHED, 96)
    assert "list" in built.data.description and "not hashed" in built.data.description
    declared = DataSource("synthetic", "memory", "ab" * 32, "sha256-content", 4)
    assert Built(None, None, None, [], declared).data is declared
    assert DataSource.undeclared(iter(())).num_samples == 0  # no dataset, no length: still a record


def test_an_undeclared_dataset_is_not_checked_against_the_baseline() -> None:
    # What the docs say: undeclared data compares equal whatever it holds.
    undeclared = DataSource.undeclared().to_dict()
    base = make_result("tiny", seed=1)
    base = base.__class__(**{**base.__dict__, "data": {**undeclared, "num_samples": 10}})
    head = base.__class__(**{**base.__dict__, "data": {**undeclared, "num_samples": 99}})
    from perfgate.store.baselines import updated_baseline

    assert incomparable(head, updated_baseline(None, base, "first", append=False)) == {}


def test_the_public_names_do_not_load_torch_until_used() -> None:
    code = ("import sys, perfgate; light = not {'torch', 'pandas', 'scipy'} & set(sys.modules); "
            "from perfgate import WorkloadComparison, PhaseRow, PhaseFlag, LogRatio, TimeDecision; "
            "typed = 'torch' not in sys.modules; "
            "import perfgate.history; import perfgate.analysis.history as h; "
            "from perfgate import make_loader; import perfgate.measure.loader as m; "
            "print(light, typed, perfgate.history.load is h.load, make_loader is m.make_loader)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True", "True"]


def test_the_fixture_types_are_the_ones_exported() -> None:
    from perfgate.analysis.decide import PhaseFlag
    from perfgate.analysis.outcome import PhaseRow, WorkloadComparison
    from perfgate.analysis.stats import LogRatio

    assert (perfgate.WorkloadComparison, perfgate.PhaseRow, perfgate.PhaseFlag, perfgate.LogRatio) == (
        WorkloadComparison, PhaseRow, PhaseFlag, LogRatio)
    assert {"make_loader", "history", "WorkloadComparison"} <= set(dir(perfgate)) & set(perfgate.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        perfgate.nope  # noqa: B018
