"""The kernel's options as one frozen record: parsed and checked once when the kernel is made,
resolved once per target, and the disk cache's key holding everything that changes the code."""
import dataclasses

import numpy as np
import pytest

import hyb
from hyb.errors import HybridArgumentError
from hyb.runtime import cache
from hyb.runtime.options import KernelOptions
from hyb.schedule.options import OPTION_KEYS, ScheduleOptions, parse_options
from hyb.target import cuda_device, host_cpu
from tests.schedule.test_schedule import SRC  # matmul among others


def test_the_records_are_frozen_and_parsed_when_the_kernel_is_made():
    k = hyb.compile_source(SRC, schedule={"tile": 8}, fastmath=True).matmul
    assert isinstance(k.options, KernelOptions) and isinstance(k.options.schedule, ScheduleOptions)
    assert k.options["fastmath"] is True and k.options.schedule.tile == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.options.fastmath = False
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.options.schedule.tile = 4
    # a bad option fails when the kernel is made, not at its first call
    with pytest.raises(HybridArgumentError, match="schedule option tile=0 is not valid"):
        hyb.compile_source(SRC, schedule={"tile": 0})


def test_none_means_the_target_decides():
    given = parse_options({"parallel": False})
    assert given.tile is None and given.register is None and given.min_parallel_work is None
    cpu, gpu = given.resolve(host_cpu(1)), given.resolve(cuda_device())
    assert cpu.parallel is False and gpu.parallel is False  # the user's value on every target
    assert cpu.tile is True and cpu.register is True and cpu.min_parallel_work == host_cpu(1).min_parallel_work
    assert cpu.machine == host_cpu(1)
    assert gpu.tile is False and gpu.register is False and gpu.min_parallel_work == 0 and gpu.machine is None
    assert all(getattr(cpu, k) is not None for k in OPTION_KEYS if k not in ("pack", "cache_tile"))
    # fast-math implies reassociated sums on the CPU; the CUDA back end keeps program order
    assert parse_options(None).resolve(host_cpu(1), fastmath=True).reassociate is True
    assert parse_options({"reassociate": False}).resolve(host_cpu(1), fastmath=True).reassociate is True
    assert parse_options({"reassociate": True}).resolve(cuda_device()).reassociate is False
    assert parse_options("original").resolve(host_cpu(1)).tile is False


@pytest.mark.parametrize("given,words", [
    ({"tile": 0}, "tile=0 is not valid"), ({"tile": (4, 0)}, "tile=(4, 0) is not valid"),
    ({"tile": 2.5}, "tile=2.5 is not valid"), ({"cache_tile": 0}, "cache_tile=0 is not valid"),
    ({"cache_tile": (8, "x")}, "cache_tile=(8, 'x') is not valid"),
    ({"max_operations": -1}, "max_operations=-1 must be a count >= 0"),
    ({"analysis_operations": True}, "analysis_operations=True must be a count >= 0"),
    ({"timeout": "long"}, "timeout='long' must be a number of seconds"),
    ({"pack": None}, "pack=None must be True or False"),
    ({"recompute": "yes"}, "recompute='yes' must be True or False"),
])
def test_each_bad_value_is_named(given, words):
    with pytest.raises(HybridArgumentError) as info:
        parse_options(given)
    assert words in info.value.message


def test_an_int_tile_is_that_tile_on_every_band_member():
    a = np.ones((40, 40))
    one = hyb.compile_source(SRC, schedule={"tile": 8, "register": False}).matmul.compile(a, a)
    three = hyb.compile_source(SRC, schedule={"tile": (8, 8, 8), "register": False}).matmul.compile(a, a)
    assert "band of 3 tiled (8, 8, 8)" in one.inspect("schedule")
    assert one.inspect("llvm-opt") == three.inspect("llvm-opt")
    np.testing.assert_allclose(one(a, a), a @ a)


def test_cache_tiles_and_band_tiles_are_separate_options():
    a = np.random.default_rng(0).random((100, 90)).astype(np.float32)
    b = np.random.default_rng(1).random((90, 80)).astype(np.float32)
    blocked = hyb.compile_source(SRC, schedule={"cache_tile": (12, 64, 30)}).matmul.compile(a, b)
    text = blocked.inspect("schedule")
    assert "tiled (12, 64, 30) for the caches" in text and "register block" in text
    # band tiles do not steer a register-blocked contraction's cache tiles
    banded = hyb.compile_source(SRC, schedule={"tile": (12, 64, 30)}).matmul.compile(a, b)
    assert "register block" in banded.inspect("schedule")
    assert "tiled (12, 64, 30) for the caches" not in banded.inspect("schedule")
    for ck in (blocked, banded):
        np.testing.assert_allclose(ck(a, b), a @ b, rtol=1e-5)
    # the blocks the plan made are those of the plan the loops follow
    assert blocked.plan.blocks and blocked.plan.blocks[0][1] == (12, 64, 30)


def test_the_disk_cache_key_holds_what_changes_the_code():
    k = hyb.compile_source(SRC).matmul
    spec = [hyb.runtime.compiler.arg_spec(np.zeros((4, 4)))] * 2
    key = cache.key("matmul", k.module, spec, k.options)
    assert key == cache.key("matmul", k.module, spec, {})
    assert key != cache.key("matmul", k.module, spec, {"schedule": {"tile": 8}})
    assert key != cache.key("matmul", k.module, spec, {"schedule": {"cache_tile": (8, 8, 8)}})
    # the sizes a shape-generic compile sizes its register blocks for change its code
    assert cache.key("matmul", k.module, spec, k.options, {"hs_a_0": 64}) != \
        cache.key("matmul", k.module, spec, k.options, {"hs_a_0": 8})
    # the threads are read when the code runs
    assert key == cache.key("matmul", k.module, spec, {"threads": 3})
