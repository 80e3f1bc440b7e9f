"""The code stage alone: a loop nest -> LLVM IR text, checked for what it must contain."""
from __future__ import annotations

import re

import numpy as np

import hyb
from hyb.codegen import abi
from hyb.codegen import llvm as llvm_codegen
from hyb.runtime import pipeline
from hyb.target import CpuTarget, host_cpu

SRC = '''def gather(a, idx):
    c = output_tensor(idx.shape, a.dtype)
    for i in range(idx.shape[0]):
        c[i] = a[idx[i]]
    return c

def big(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = a[i, j] // 3
    return c

def short(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = a[i, j] * 2.0
    return c
'''


def ir_of(name, *args, target=None):
    typed = hyb.compile_source(SRC).kernels[name].typed(*args)
    target = target or host_cpu(1)
    middle = pipeline.middle_end(typed, {}, target)
    return llvm_codegen.generate_ir(middle.code, llvm_codegen.Options(target=target)), typed


def test_a_subscript_checked_at_run_time_branches_to_its_check_site():
    generated, typed = ir_of("gather", np.zeros(5), np.zeros(3, np.int64))
    assert [s.tensor for s in generated.sites] == ["a"]
    # the calling convention: one pointer per tensor in abi.buffer_order, then the runtime block
    params = ", ".join(f'ptr noalias %"t_{n}"' for n in abi.buffer_order(typed))
    assert f'define i32 @"{abi.function_name(typed)}"({params}, ptr noalias %"rt")' in generated.ir
    assert "ret i32 1" in generated.ir  # the check site's number, returned when the index is out of bounds


def test_a_parallel_loop_is_outlined():
    generated, _ = ir_of("big", np.zeros((512, 512), np.int64))
    assert ".par0" in generated.ir and "GOMP_parallel" in generated.ir


def test_one_thread_runs_the_outlined_body_as_thread_0_of_1():
    # the body takes its thread's number and the number of threads as arguments: libgomp's threads
    # ask the runtime (in the trampoline), the one-thread path passes 0 and 1, which LLVM folds
    # into the loop's bounds once the body is inlined (the loop's own constant bounds)
    generated, typed = ir_of("big", np.zeros((512, 512), np.int64))
    name = abi.function_name(typed)
    main = generated.ir[generated.ir.index(f'define i32 @"{name}"'):]
    main = main[:main.index("\n}\n")]
    assert "GOMP_parallel" in main and "omp_get_thread_num" not in main
    assert re.search(r'call void @"[^"]+\.par0\.body"\(.*i64 0, i64 1\)', main), main
    tramp = generated.ir[generated.ir.index(f'define void @"{name}.par0"('):]
    assert "omp_get_thread_num" in tramp[:tramp.index("\n}\n")]
    big = hyb.compile_source(SRC).kernels["big"]
    x = np.arange(512 * 512, dtype=np.int64).reshape(512, 512)
    np.testing.assert_array_equal(hyb.compile_source(SRC, threads=1).kernels["big"](x), big.emulate(x))
    np.testing.assert_array_equal(hyb.compile_source(SRC, threads=2).kernels["big"](x), big.emulate(x))


def test_a_vector_loop_carries_its_metadata():
    generated, _ = ir_of("short", np.zeros((8, 32)))
    assert "llvm.loop.unroll.disable" in generated.ir and "llvm.loop.vectorize.followup_all" in generated.ir


def test_the_target_decides_the_vector_width():
    wide = CpuTarget(vector_bits=512, vector_registers=32, features=frozenset({"avx512f"}), threads=1)
    narrow = CpuTarget(vector_bits=256, features=frozenset({"avx2"}), threads=1)
    a = np.zeros((8, 32))
    assert '"prefer-vector-width"="512"' in ir_of("short", a, target=wide)[0].ir
    assert "prefer-vector-width" not in ir_of("short", a, target=narrow)[0].ir
