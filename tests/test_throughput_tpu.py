"""The TPU (torch-xla) back-end. The XLA tests run for real on the XLA CPU client in the
torch-xla environment (``scripts/setup_xla_env.sh --test`` sets PJRT_DEVICE=CPU) and skip in
the main environment, where the XLA-free parts are checked."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from anb.collect_throughput.backends import get_backend
from anb.collect_throughput.targets.local import measure
from anb.collect_throughput.timing.loop import CompilationDuringTiming, run_loop
from anb.collect_throughput.timing.protocol import Protocol, StoppingRule, WarmupRule, load_device
from anb.searchspace.arch import Arch
from anb.searchspace.space import ANB_SPACE

HAS_XLA = importlib.util.find_spec("torch_xla") is not None
needs_xla = pytest.mark.skipif(not HAS_XLA, reason="needs torch-xla (scripts/setup_xla_env.sh)")
SMALL = Arch.from_string("e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1se", ANB_SPACE)
FAST = dict(resolution=32, batch=2, warmup=WarmupRule(min_steps=3, window=2, max_seconds=300),
            stopping=StoppingRule(min_reps=5, max_reps=20, budget_seconds=1.0,
                                  min_rep_seconds=0.0))


def _protocol(**kw) -> Protocol:
    return Protocol(**{"device": "tpuv3", "backend": "xla", "kind": "throughput",
                       "precision": "bf16", **FAST, **kw})


def test_tpu_configs_follow_the_reference():
    for name, batch in (("tpuv2", 64), ("tpuv3", 128)):
        (protocol,) = load_device(name, space=ANB_SPACE.name).protocols
        assert protocol.backend == "xla" and protocol.precision == "bf16"
        assert protocol.batch == batch and protocol.allow_fallbacks is False


def test_xla_backend_rejects_what_it_cannot_run(tmp_path):
    backend = get_backend("xla")
    with pytest.raises(ValueError, match="precision='fp16'"):
        backend.check(_protocol(precision="fp16"))
    with pytest.raises(ValueError, match="layout='channels_last'"):
        backend.check(_protocol(layout="channels_last"))


@pytest.mark.skipif(HAS_XLA, reason="checks the message shown without torch-xla")
def test_missing_torch_xla_points_to_the_setup_script(tmp_path):
    with pytest.raises(RuntimeError, match="setup_xla_env.sh"):
        get_backend("xla").prepare(SMALL, _protocol(), tmp_path)


@needs_xla
def test_xla_measurement_warms_up_through_compilation(tmp_path):
    m = measure(SMALL, _protocol(), tmp_path)
    assert m.extra["warmup_compiles"] >= 1  # the first step compiled, warm-up waited for it
    assert m.extra["xla_fallback_ops"] == []
    assert m.environment["device_name"] == "CPU" and m.environment["pjrt_device"] == "CPU"
    assert "torch-xla" in m.environment["libraries"]
    assert m.value > 0 and len(m.times_s) >= 3
    assert m.to_perf_entry()["precision"] == "bf16"


@needs_xla
def test_new_shape_while_timing_is_caught():
    import torch_xla

    from anb.collect_throughput.backends.xla import XlaClock, compile_count

    device = torch_xla.device()
    calls = {"n": 0}

    def step():
        calls["n"] += 1
        size = 8 if calls["n"] < 8 else 9  # a new shape after warm-up (at most 4 steps)
        calls["out"] = (torch.ones(size, size, device=device) * 2).sum()  # kept live: compiled
        torch_xla.sync()

    with pytest.raises(CompilationDuringTiming):
        run_loop(step, XlaClock(), WarmupRule(min_steps=3, window=2, max_steps=4),
                 StoppingRule(min_reps=50, max_reps=100, rel_ci=1e-9, min_rep_seconds=0.0),
                 compile_count)


# ~3.4x SMALL's MACs
BIG = Arch.from_string("e4k3l1-e4k3l1-e4k3l1-e4k3l1-e4k3l1-e4k3l1-e4k3l1se", ANB_SPACE)


def test_big_model_has_about_three_times_the_macs():
    from anb.searchspace.counting import count

    ratio = count(BIG, resolution=64, space=ANB_SPACE).macs / count(SMALL, resolution=64,
                                                                    space=ANB_SPACE).macs
    assert 3.0 < ratio < 4.0, ratio


@needs_xla
def test_every_timed_step_executes_the_network(tmp_path):
    """Issue 12 item 1: a dropped output leaves XLA nothing to run; each step must execute."""
    from anb.collect_throughput.backends.xla import execution_count

    session = get_backend("xla").prepare(SMALL, _protocol(resolution=64, batch=4), tmp_path)
    for _ in range(3):  # compile + warm
        session.clock.start()
        session.step()
        session.clock.stop()
    before = execution_count()
    session.clock.start()
    for _ in range(7):
        session.step()
    session.clock.stop()
    assert execution_count() - before == 7
    assert session.clock.live == []  # released once the clock stopped


@needs_xla
def test_three_times_the_macs_measures_clearly_slower(tmp_path):
    protocol = _protocol(resolution=64, batch=4, stopping=StoppingRule(
        min_reps=5, max_reps=10, budget_seconds=2.0, min_rep_seconds=0.0))
    small = measure(SMALL, protocol, tmp_path / "s")
    big = measure(BIG, protocol, tmp_path / "b")
    assert big.value < small.value / 1.5, (small.value, big.value)
