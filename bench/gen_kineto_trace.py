#!/usr/bin/env python3
"""Generate a large, realistic PyTorch-Kineto-style Chrome trace, streamed to disk.

Why this exists: the benchmark needs traces of 1 GB and more that look like what
``torch.profiler`` writes on a GPU training job (the traces users cannot open), and
that are byte-identical from one run to the next so that timings are comparable.
Real traces of that size cannot be shipped in the repository, and a real GPU is
not available on the benchmark machine, so this script synthesises one.

What "realistic" means here, all taken from real Kineto files in
``shared/corpus/public`` (HolisticTraceAnalysis, TraceLens, Kineto samples):

* Object format with Kineto's top-level keys in Kineto's order (``schemaVersion``,
  ``deviceProperties``, ``distributedInfo``, ``traceEvents``, ``traceName``,
  ``displayTimeUnit``, ``baseTimeNanoseconds``) and Kineto's own line layout
  (one key group per line, two-space indent, the odd ``",      "`` spacing in
  GPU args).
* Kineto's event *order*, which is not time order: first every CPU op of the
  whole trace (per step, main thread then the autograd thread, each in start
  order, with ``fwdbwd`` flows among them), then every ``[memory]`` instant,
  then CUDA runtime calls, ``ac2g`` flow starts, GPU kernels / memcpys and flow
  ends interleaved, then the ``M`` metadata, the ``Spans`` slice and two global
  instants with string pids/tids.
* A transformer-block training step: ``ProfilerStep#N`` > data loading >
  forward ops (``aten::linear`` > ``aten::t`` > ``aten::transpose`` >
  ``aten::as_strided``, ``aten::addmm`` > ``cudaLaunchKernel`` ...), backward
  ops on the ``pt_autograd_0`` thread (``autograd::engine::evaluate_function:
  AddmmBackward0`` ...), NCCL all-reduce kernels on stream 20, a foreach AdamW
  step whose ``Input Dims`` list every parameter, and a blocking
  ``cudaStreamSynchronize`` at the end of the step. GPU kernels are queued per
  stream after their launch, so they never overlap on a stream and lag the CPU.
* Durations from sub-microsecond (``aten::as_strided``) to milliseconds
  (GEMMs, flash attention backward, NCCL, synchronisation, the step itself);
  timestamps are integers in ns internally, written as µs with 3 decimals.

Memory: the CPU-op section goes straight into the gzip stream; the ``[memory]``
and GPU sections are spooled to two temporary files next to the output and
appended at the end (so they keep Kineto's order without holding the trace in
memory). Peak RSS stays at a few tens of MB whatever the size.

Determinism: one ``random.Random`` per step, seeded from ``--seed`` and the step
number; integer time arithmetic; gzip header with mtime 0. The same arguments
give byte-identical files.

Usage::

    python3 bench/gen_kineto_trace.py --size-mb 1024 -o /tmp/big.pt.trace.json.gz
    python3 bench/gen_kineto_trace.py --events 1000000 -o /tmp/1m.pt.trace.json.gz
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import BinaryIO

import isal.isal_zlib as izlib

MIB = 1024 * 1024
FLUSH_BYTES = 4 * MIB  # join and compress in chunks of about this size


# --------------------------------------------------------------------------- #
# Output plumbing
# --------------------------------------------------------------------------- #


class GzipSink:
    """Raw bytes -> gzip (or plain) file, written in large chunks.

    Why the low-level compressobj: ``igzip.open`` adds its own buffering and a
    header with the current mtime; the compressobj with wbits=31 writes a gzip
    member with mtime 0, so the file is byte-for-byte reproducible.
    """

    def __init__(self, path: str, level: int, compress: bool) -> None:
        self._f: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._c = izlib.compressobj(level, izlib.DEFLATED, 31) if compress else None
        self.raw_bytes = 0

    def write(self, data: bytes) -> None:
        self.raw_bytes += len(data)
        self._f.write(self._c.compress(data) if self._c is not None else data)

    def close(self) -> None:
        if self._c is not None:
            self._f.write(self._c.flush())
        self._f.close()


class Section:
    """An ordered list of pre-rendered events, flushed to a sink in chunks.

    Every event string ends with ``",\\n"`` so sections can be concatenated
    without bookkeeping; the trailer's last event carries no comma.
    """

    def __init__(self, sink: GzipSink | BinaryIO) -> None:
        self.sink = sink
        self.parts: list[str] = []
        self.pending = 0
        self.bytes = 0
        self.events = 0

    def add(self, s: str) -> None:
        self.parts.append(s)
        self.pending += len(s)
        self.events += 1
        if self.pending >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            data = "".join(self.parts).encode()
            self.bytes += len(data)
            self.sink.write(data)
            self.parts.clear()
            self.pending = 0


def fmt_us(ns: int) -> str:
    """ns integer -> Kineto's µs float text with exactly 3 decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"


# --------------------------------------------------------------------------- #
# Model description: op templates
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Kernel:
    """A GPU activity launched by a CPU op (kernel, memcpy or memset)."""

    name: str
    dur_ns: int  # mean duration on the GPU
    stream: int = 7
    cat: str = "kernel"
    runtime: str = "cudaLaunchKernel"
    cbid: int = 211
    static_args: str = ""  # pre-rendered tail of the args after "correlation"


@dataclass(frozen=True)
class Op:
    """A CPU op (``cpu_op`` or ``user_annotation``) with its children."""

    name: str
    self_ns: int  # CPU time spent outside children (split before/after them)
    args: str = ""  # pre-rendered record_shapes args ("Concrete Inputs" ... "Input Dims")
    children: tuple[Op, ...] = ()
    kernels: tuple[Kernel, ...] = ()
    alloc: int = 0  # bytes allocated on the GPU (one [memory] instant), 0 for none
    cat: str = "cpu_op"
    seq: bool = False  # has an autograd "Sequence number"
    bwd: str = ""  # name of the backward node for this op (fwdbwd flow), "" for none


def shapes(types: list[str], dims: list[list[int]], concrete: list[str] | None = None) -> str:
    """Render Kineto's record_shapes args; strides derived as contiguous."""

    def strides(d: list[int]) -> list[int]:
        out: list[int] = []
        acc = 1
        for n in reversed(d):
            out.append(acc)
            acc *= n
        return out[::-1]

    if concrete is None:
        # Recent Kineto writes "Concrete Inputs" for every op: "" for tensors.
        concrete = ["0" if ty == "Scalar" else "[]" if ty == "ScalarList" else "" for ty in types]
    parts = [f'"Concrete Inputs": {json.dumps(concrete)}']
    parts.append(f'"Input type": {json.dumps(types)}')
    parts.append(f'"Input Strides": {json.dumps([strides(d) for d in dims])}')
    parts.append(f'"Input Dims": {json.dumps(dims)}')
    return ", ".join(parts)


def kargs(regs: int, smem: int, grid: tuple[int, int, int], block: tuple[int, int, int], occ: int) -> str:
    """Render the static part of CUPTI kernel args (after "correlation")."""
    nblocks = grid[0] * grid[1] * grid[2]
    bps = nblocks / 132
    wps = bps * (block[0] * block[1] * block[2]) / 32
    return (
        f'"registers per thread": {regs},      "shared memory": {smem},      '
        f'"blocks per SM": {bps:.6f},      "warps per SM": {wps:.6f},      '
        f'"grid": [{grid[0]}, {grid[1]}, {grid[2]}],      "block": [{block[0]}, {block[1]}, {block[2]}],      '
        f'"est. achieved occupancy %": {occ}'
    )


BF16 = "c10::BFloat16"
GEMM_TN = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
GEMM_NN = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize256x128x64_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
GEMM_NT = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x256x64_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
K_LAYERNORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"
)
K_LN_BWD_IN = (
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>"
    "(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, "
    "c10::BFloat16*, int)"
)
K_LN_BWD_GB = (
    "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::BFloat16, float, 32u, "
    "32u, 256u, false, true>(long, long, c10::BFloat16 const*, c10::BFloat16 const*, float const*, "
    "float const*, c10::BFloat16*, c10::BFloat16*)"
)
K_ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
)
K_GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
    "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl("
    "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::"
    "operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)"
)
K_GELU_BWD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl("
    "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::"
    "operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int, "
    "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::"
    "operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, "
    "std::array<char*, 3ul>)"
)
K_DROPOUT = (
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, unsigned int, 1, 8, "
    "bool>(at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<"
    "c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, "
    "at::PhiloxCudaState)"
)
K_MASKED_SCALE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::masked_scale_kernel"
    "<bool, c10::BFloat16, float>(at::Tensor&, at::Tensor const&, at::Tensor const&, float)::{lambda("
    "c10::BFloat16, bool)#1}, std::array<char*, 3ul> >(int, at::native::(anonymous namespace)::"
    "masked_scale_kernel<bool, c10::BFloat16, float>(at::Tensor&, at::Tensor const&, at::Tensor const&, "
    "float)::{lambda(c10::BFloat16, bool)#1}, std::array<char*, 3ul>)"
)
K_COPY = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::"
    "operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::"
    "operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::"
    "gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::"
    "operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>("
    "at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::"
    "operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::"
    "{lambda(int)#1})"
)
K_FLASH_FWD = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, "
    "true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"
)
K_FLASH_BWD_DOT = (
    "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, "
    "2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, "
    "cutlass::bfloat16_t> > >(pytorch_flash::Flash_bwd_params)"
)
K_FLASH_BWD = (
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::Flash_bwd_kernel_traits<128, "
    "64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, "
    "8, cutlass::bfloat16_t> >, true, true, false, false, false, true, true>(pytorch_flash::Flash_bwd_params)"
)
K_FLASH_BWD_CVT = (
    "void pytorch_flash::flash_bwd_convert_dq_kernel<pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, "
    "4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, "
    "cutlass::bfloat16_t> > >(pytorch_flash::Flash_bwd_params, int)"
)
K_CAT = (
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::(anonymous "
    "namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::OpaqueType<2u>*, "
    "at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::"
    "OpaqueType<2u>, unsigned int, 64, 64>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, "
    "4u>, int, unsigned int)"
)
K_REDUCE = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<c10::BFloat16, float, float>::operator()(at::TensorIterator&)::{lambda(float, "
    "float)#1}>, unsigned int, c10::BFloat16, 4, 4> >(at::native::ReduceOp<c10::BFloat16, at::native::"
    "func_wrapper_t<float, at::native::sum_functor<c10::BFloat16, float, float>::operator()(at::TensorIterator&"
    ")::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4, 4>)"
)
K_SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, c10::BFloat16, "
    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)"
)
K_NLL = (
    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<c10::BFloat16, float, long>"
    "(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, long const*, c10::BFloat16 const*, bool, long, "
    "long, long, long)"
)
K_NLL_BWD = (
    "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<c10::BFloat16, long>"
    "(c10::BFloat16*, c10::BFloat16 const*, long const*, c10::BFloat16 const*, c10::BFloat16 const*, bool, "
    "int, int, long, long)"
)
K_SOFTMAX_BWD = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::BFloat16, float, c10::BFloat16, "
    "at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, "
    "c10::BFloat16 const*, long)"
)
K_FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, std::array<char*, "
    "1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)"
)
K_NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _foreach_kernel(op: str) -> str:
    return (
        f"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        f"TensorListMetadata<{2 if op != 'addcdiv' else 4}>, at::native::(anonymous namespace)::"
        f"{'BinaryOpScalarFunctor' if op != 'addcdiv' else 'PointwiseOpScalarFunctor'}<c10::BFloat16, "
        f"{2 if op != 'addcdiv' else 4}, 1, 1>, std::{op}<float>, float>(at::native::(anonymous namespace)::"
        f"TensorListMetadata<{2 if op != 'addcdiv' else 4}>, at::native::(anonymous namespace)::"
        f"BinaryOpScalarFunctor<c10::BFloat16, 2, 1, 1>, std::{op}<float>, float)"
    )


def build_model(layers: int) -> tuple[list[Op], list[list[Op]], Op, Op, Op]:
    """Build the op templates of one training step.

    Returns (forward ops per block flattened with the head, backward ops per
    block in execution order, the data-loading op, the optimizer step, the
    end-of-step ``aten::item``). A transformer block with hidden 2048, 8x1024
    tokens, bf16 on an H100-like GPU: GEMMs of 100s of µs, elementwise kernels
    of 10s of µs, flash attention backward over a millisecond.
    """
    b, s, h, f = 8, 1024, 2048, 8192
    x3 = [b, s, h]
    ga = kargs(168, 213120, (16, 64, 1), (384, 1, 1), 12)
    ew = kargs(26, 0, (8192, 1, 1), (128, 1, 1), 100)

    def as_strided(d: list[int]) -> Op:
        return Op("aten::as_strided", 400, shapes([BF16, "ScalarList", "ScalarList", "Scalar"], [d, [], [], []],
                                                  ["", str(d[::-1]), "[1, 2048]", "0"]))

    def transpose(d: list[int]) -> Op:
        return Op("aten::transpose", 1500, shapes([BF16, "Scalar", "Scalar"], [d, [], []], ["", "0", "1"]),
                  (as_strided(d[::-1]),))

    def t(d: list[int]) -> Op:
        return Op("aten::t", 1800, shapes([BF16], [d]), (transpose(d),), seq=True)

    def empty(n: int) -> Op:
        return Op("aten::empty", 900, shapes(["ScalarList", "Scalar", "", "Scalar", "", ""],
                                             [[], [], [], [], [], []], [f"[{n}]", "15", "", "0", "", ""]), alloc=n * 2)

    def linear(out_f: int, in_f: int, gemm: str, dur: int) -> Op:
        return Op(
            "aten::linear", 3500,
            shapes([BF16, BF16, BF16], [x3[:2] + [in_f], [out_f, in_f], [out_f]]),
            (t([out_f, in_f]),
             Op("aten::addmm", 9000,
                shapes([BF16, BF16, BF16, "Scalar", "Scalar"], [[out_f], [b * s, in_f], [in_f, out_f], [], []],
                       ["", "", "", "1", "1"]),
                kernels=(Kernel(gemm, dur, static_args=ga),), alloc=b * s * out_f * 2, seq=True,
                bwd="AddmmBackward0"),
             Op("aten::view", 900, shapes([BF16, "ScalarList"], [[b * s, out_f], []], ["", str([b, s, out_f])]),
                seq=True)),
            seq=True)

    def layer_norm() -> Op:
        return Op(
            "aten::layer_norm", 2500,
            shapes([BF16, "ScalarList", BF16, BF16, "Scalar", "Scalar"], [x3, [], [h], [h], [], []],
                   ["", f"[{h}]", "", "", "1e-05", "True"]),
            (Op("aten::native_layer_norm", 6000,
                shapes([BF16, "ScalarList", BF16, BF16, "Scalar"], [x3, [], [h], [h], []], ["", f"[{h}]", "", "", "1e-05"]),
                (empty(b * s * h), empty(b * s), empty(b * s)),
                kernels=(Kernel(K_LAYERNORM, 48000, static_args=kargs(30, 0, (8192, 1, 1), (32, 4, 1), 50)),),
                seq=True, bwd="NativeLayerNormBackward0"),),
            seq=True)

    def elementwise(name: str, kname: str, dur: int, nin: int = 2, bwd: str = "") -> Op:
        return Op(name, 7000, shapes([BF16] * nin + (["Scalar"] if name == "aten::add" else []),
                                     [x3] * nin + ([[]] if name == "aten::add" else [])),
                  kernels=(Kernel(kname, dur, static_args=ew),), alloc=b * s * h * 2, seq=True, bwd=bwd)

    def dropout() -> Op:
        return Op("aten::dropout", 2000, shapes([BF16, "Scalar", "Scalar"], [x3, [], []], ["", "0.1", "True"]),
                  (Op("aten::native_dropout", 8000, shapes([BF16, "Scalar", "Scalar"], [x3, [], []], ["", "0.1", "True"]),
                      (empty(b * s * h),),
                      kernels=(Kernel(K_DROPOUT, 31000, static_args=ew),), alloc=b * s * h, seq=True,
                      bwd="NativeDropoutBackward0"),), seq=True)

    def attention() -> list[Op]:
        qkv = [b, s, 3 * h]
        ops = [
            Op("aten::chunk", 2500, shapes([BF16, "Scalar", "Scalar"], [qkv, [], []], ["", "3", "-1"]),
               (Op("aten::split", 3000, shapes([BF16, "Scalar", "Scalar"], [qkv, [], []], ["", "2048", "-1"]),
                   tuple(Op("aten::narrow", 1200, shapes([BF16, "Scalar", "Scalar", "Scalar"], [qkv, [], [], []]),
                            (Op("aten::slice", 1500, shapes([BF16, "Scalar", "Scalar", "Scalar", "Scalar"],
                                                            [qkv, [], [], [], []]), (as_strided(x3),)),))
                         for _ in range(3)), seq=True),), seq=True),
        ]
        for _ in range(3):
            ops.append(Op("aten::view", 900, shapes([BF16, "ScalarList"], [x3, []], ["", "[8, 1024, 16, 128]"]),
                          seq=True))
            ops.append(transpose([b, s, 16, 128]))
        ops.append(Op(
            "aten::scaled_dot_product_attention", 4000,
            shapes([BF16, BF16, BF16, "", "Scalar", "Scalar", "", "Scalar"],
                   [[b, 16, s, 128]] * 3 + [[], [], [], [], []], ["", "", "", "", "0.", "True", "", "False"]),
            (Op("aten::_scaled_dot_product_flash_attention", 5000,
                shapes([BF16, BF16, BF16, "Scalar", "Scalar", "Scalar", ""], [[b, 16, s, 128]] * 3 + [[], [], [], []]),
                (Op("aten::_flash_attention_forward", 9000,
                    shapes([BF16, BF16, BF16, "", "", "Scalar", "Scalar", "Scalar", "Scalar"],
                           [[b, s, 16, 128]] * 3 + [[]] * 6),
                    (empty(b * s * h), empty(b * 16 * s)),
                    kernels=(Kernel(K_FLASH_FWD, 610000, static_args=kargs(255, 49152, (8, 8, 16), (128, 1, 1), 6)),)),),
                seq=True, bwd="ScaledDotProductFlashAttentionBackward0"),),
            seq=True))
        ops.append(transpose([b, 16, s, 128]))
        ops.append(Op("aten::reshape", 1500, shapes([BF16, "ScalarList"], [[b, s, 16, 128], []], ["", "[8, 1024, 2048]"]),
                      (Op("aten::clone", 3000, shapes([BF16, "Scalar"], [[b, s, 16, 128], []]),
                          (Op("aten::empty_like", 1500, shapes([BF16, "", "", "", "", "Scalar"], [[b, s, 16, 128]] + [[]] * 5),
                              (Op("aten::empty_strided", 1200, shapes(["ScalarList", "ScalarList", "Scalar", "Scalar", "", ""],
                                                                      [[]] * 6), alloc=b * s * h * 2),)),
                           Op("aten::copy_", 6000, shapes([BF16, BF16, "Scalar"], [[b, s, 16, 128]] * 2 + [[]]),
                              kernels=(Kernel(K_COPY, 42000, static_args=ew),))), seq=True),
                       Op("aten::_unsafe_view", 900, shapes([BF16, "ScalarList"], [[b, s, 16, 128], []]), seq=True)),
                      seq=True))
        return ops

    fwd: list[Op] = []
    bwd_blocks: list[list[Op]] = []
    for _ in range(layers):
        block = [layer_norm(), linear(3 * h, h, GEMM_TN, 365000)]
        block += attention()
        block += [linear(h, h, GEMM_TN, 128000), dropout(),
                  elementwise("aten::add", K_ADD, 26000, bwd="AddBackward0"),
                  layer_norm(), linear(f, h, GEMM_NN, 490000),
                  elementwise("aten::gelu", K_GELU, 61000, nin=1, bwd="GeluBackward0"),
                  linear(h, f, GEMM_TN, 475000), dropout(),
                  elementwise("aten::add", K_ADD, 26000, bwd="AddBackward0")]
        fwd += block
        bwd_blocks.insert(0, _backward_block(b, s, h, f, ga, ew))

    # Head: final norm, LM head, loss.
    vocab = 32000
    nll_args = shapes([BF16, "long int", "", "Scalar", "Scalar"], [[b * s, vocab], [b * s], [], [], []])
    fwd += [layer_norm(), linear(vocab, h, GEMM_NN, 1_850_000),
            Op("aten::cross_entropy_loss", 3000, shapes([BF16, "long int", "", "Scalar", "Scalar", "Scalar"],
                                                        [[b * s, vocab], [b * s], [], [], [], []]),
               (Op("aten::log_softmax", 2000, shapes([BF16, "Scalar", ""], [[b * s, vocab], [], []]),
                   (Op("aten::_log_softmax", 7000, shapes([BF16, "Scalar", "Scalar"], [[b * s, vocab], [], []]),
                       kernels=(Kernel(K_SOFTMAX, 520000, static_args=ew),), alloc=b * s * vocab * 2, seq=True,
                       bwd="LogSoftmaxBackward0"),), seq=True),
                Op("aten::nll_loss_nd", 1500, nll_args,
                   (Op("aten::nll_loss", 1500, nll_args,
                       (Op("aten::nll_loss_forward", 6000, nll_args,
                           kernels=(Kernel(K_NLL, 11000, static_args=kargs(32, 2048, (1, 1, 1), (32, 1, 1), 1)),),
                           alloc=512, seq=True, bwd="NllLossBackward0"),), seq=True),), seq=True)),
               seq=True),
            Op("aten::ones_like", 2500, shapes([BF16, "", "", "", "", "Scalar"], [[]] * 6),
               (Op("aten::fill_", 4000, shapes([BF16, "Scalar"], [[], []], ["", "1"]),
                   kernels=(Kernel(K_FILL, 1800, static_args=kargs(16, 0, (1, 1, 1), (128, 1, 1), 0)),)),))]

    data = Op(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 180000,
        children=tuple(
            [Op("aten::stack", 9000, shapes(["TensorList", "Scalar"], [[], []]),
                (Op("aten::cat", 40000, shapes(["TensorList", "Scalar"], [[], []]), alloc=0),)) for _ in range(2)]),
        cat="user_annotation")
    data_to = [
        Op("aten::to", 2500, shapes(["long int", "", "Scalar", "Scalar", "Scalar", "", ""], [[b, s]] + [[]] * 6),
           (Op("aten::_to_copy", 5000, shapes(["long int", "", "", "Scalar", "", "Scalar", ""], [[b, s]] + [[]] * 6),
               (Op("aten::empty_strided", 1500, shapes(["ScalarList", "ScalarList", "Scalar", "", "Scalar", ""], [[]] * 6),
                   alloc=b * s * 8),
                Op("aten::copy_", 9000, shapes(["long int", "long int", "Scalar"], [[b, s], [b, s], []]),
                   kernels=(Kernel("Memcpy HtoD (Pageable -> Device)", 15000, cat="gpu_memcpy",
                                   runtime="cudaMemcpyAsync", cbid=41,
                                   static_args=f'"bytes": {b * s * 8}, "memory bandwidth (GB/s)": 4.369067'),))),),))
        for _ in range(2)]

    nparams = layers * 12 + 4
    plist = [[h], [h], [3 * h, h], [3 * h], [h, h], [h], [h], [h], [f, h], [f], [h, f], [h]] * layers
    plist += [[h], [h], [vocab, h], [vocab]]
    tl = json.dumps(plist)
    opt_children = []
    for op_name, kop in (("aten::_foreach_lerp_", "lerp"), ("aten::_foreach_mul_", "multiplies"),
                         ("aten::_foreach_addcmul_", "addcmul"), ("aten::_foreach_sqrt", "sqrt"),
                         ("aten::_foreach_div_", "divides"), ("aten::_foreach_add_", "plus"),
                         ("aten::_foreach_addcdiv_", "addcdiv")):
        nlaunch = max(1, nparams // 24)
        opt_children.append(Op(
            op_name, 25000,
            f'"Input type": ["TensorList", "TensorList", "Scalar"], "Input Strides": [[], [], []], '
            f'"Input Dims": [{tl}, {tl}, []]',
            kernels=tuple(Kernel(_foreach_kernel(kop), 95000, static_args=kargs(62, 0, (96, 1, 1), (512, 1, 1), 25))
                          for _ in range(nlaunch))))
    optim = Op("Optimizer.step#AdamW.step", 150000, children=tuple(opt_children), cat="user_annotation")

    item = Op("aten::item", 2000, shapes([BF16], [[]]),
              (Op("aten::_local_scalar_dense", 8000, shapes([BF16], [[]]),
                  kernels=(Kernel("Memcpy DtoH (Device -> Pageable)", 2800, cat="gpu_memcpy", runtime="cudaMemcpyAsync",
                                  cbid=41, static_args='"bytes": 2, "memory bandwidth (GB/s)": 0.000714'),)),))
    bwd_blocks.insert(0, _backward_block(b, s, h, f, ga, ew, head=True))
    fwd_all = data_to + fwd
    return fwd_all, bwd_blocks, data, optim, item


def _backward_block(b: int, s: int, h: int, f: int, ga: str, ew: str, head: bool = False) -> list[Op]:
    """Backward ops of one block (or of the LM head) as they run on the autograd thread."""
    x3 = [b, s, h]

    def ev(node: str, children: tuple[Op, ...], self_ns: int = 9000) -> Op:
        return Op(f"autograd::engine::evaluate_function: {node}", 4000, "",
                  (Op(node, self_ns, "", children, seq=True),), seq=True, bwd=node)

    def acc_grad() -> Op:
        return Op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 3000, "",
                  (Op("torch::autograd::AccumulateGrad", 4000, "",
                      (Op("aten::detach", 1500, shapes([BF16], [[h]]), (Op("detach", 600, shapes([BF16], [[h]])),)),)),))

    def as_strided(d: list[int]) -> Op:
        return Op("aten::as_strided", 400, shapes([BF16, "ScalarList", "ScalarList", "Scalar"], [d, [], [], []]))

    def t(d: list[int]) -> Op:
        return Op("aten::t", 1800, shapes([BF16], [d]),
                  (Op("aten::transpose", 1500, shapes([BF16, "Scalar", "Scalar"], [d, [], []], ["", "0", "1"]),
                      (as_strided(d[::-1]),)),))

    def mm(a: list[int], bb: list[int], dur: int, gemm: str) -> Op:
        return Op("aten::mm", 8000, shapes([BF16, BF16], [a, bb]), kernels=(Kernel(gemm, dur, static_args=ga),),
                  alloc=a[0] * bb[1] * 2)

    def addmm_bwd(out_f: int, in_f: int, dur: int) -> list[Op]:
        return [
            ev("AddmmBackward0", (t([in_f, out_f]), mm([b * s, out_f], [out_f, in_f], dur, GEMM_NN),
                                  t([b * s, out_f]), mm([out_f, b * s], [b * s, in_f], dur, GEMM_NT),
                                  Op("aten::sum", 7000, shapes([BF16, "ScalarList", "Scalar", ""], [[b * s, out_f], [], [], []]),
                                     kernels=(Kernel(K_REDUCE, 22000, static_args=ew),), alloc=out_f * 2),
                                  Op("aten::view", 900, shapes([BF16, "ScalarList"], [[1, out_f], []])))),
            ev("TBackward0", (t([in_f, out_f]),), 3000),
            acc_grad(), acc_grad(),
        ]

    def ln_bwd() -> list[Op]:
        return [ev("NativeLayerNormBackward0",
                   (Op("aten::native_layer_norm_backward", 12000,
                       shapes([BF16, BF16, "ScalarList", "float", "float", BF16, BF16, "ScalarList"],
                              [x3, x3, [], [b, s, 1], [b, s, 1], [h], [h], []]),
                       kernels=(Kernel(K_LN_BWD_IN, 71000, static_args=ew), Kernel(K_LN_BWD_GB, 38000, static_args=ew)),
                       alloc=b * s * h * 2),)),
                acc_grad(), acc_grad()]

    def ew_bwd(node: str, opname: str, kname: str, dur: int) -> Op:
        return ev(node, (Op(opname, 7000, shapes([BF16, BF16], [x3, x3]), kernels=(Kernel(kname, dur, static_args=ew),),
                            alloc=b * s * h * 2),))

    if head:
        vocab = 32000
        return [
            ev("NllLossBackward0",
               (Op("aten::nll_loss_backward", 8000,
                   shapes([BF16, BF16, "long int", "", "Scalar", "Scalar", BF16], [[], [b * s, vocab], [b * s], [], [], [], []]),
                   (Op("aten::zero_", 3000, shapes([BF16], [[b * s, vocab]]),
                       (Op("aten::fill_", 4000, shapes([BF16, "Scalar"], [[b * s, vocab], []], ["", "0"]),
                           kernels=(Kernel(K_FILL, 160000, static_args=ew),)),)),),
                   kernels=(Kernel(K_NLL_BWD, 9000, static_args=kargs(30, 0, (64, 1, 1), (128, 1, 1), 3)),),
                   alloc=b * s * vocab * 2),)),
            ev("LogSoftmaxBackward0",
               (Op("aten::_log_softmax_backward_data", 7000, shapes([BF16, BF16, "Scalar", "Scalar"],
                                                                    [[b * s, vocab], [b * s, vocab], [], []]),
                   kernels=(Kernel(K_SOFTMAX_BWD, 610000, static_args=ew),), alloc=b * s * vocab * 2),)),
            *addmm_bwd(vocab, h, 1_820_000),
            *ln_bwd(),
        ]
    ops: list[Op] = [ev("AddBackward0", (), 2000),
                     ew_bwd("NativeDropoutBackward0", "aten::native_dropout_backward", K_MASKED_SCALE, 33000)]
    ops += addmm_bwd(h, f, 470000)
    ops.append(ew_bwd("GeluBackward0", "aten::gelu_backward", K_GELU_BWD, 88000))
    ops += addmm_bwd(f, h, 480000)
    ops += ln_bwd()
    ops.append(ev("AddBackward0", (), 2000))
    ops.append(ew_bwd("NativeDropoutBackward0", "aten::native_dropout_backward", K_MASKED_SCALE, 33000))
    ops += addmm_bwd(h, h, 130000)
    ops.append(ev("UnsafeViewBackward0", (Op("aten::view", 900, shapes([BF16, "ScalarList"], [x3, []])),), 2500))
    ops.append(ev("CloneBackward0", (), 2000))
    ops.append(ev("TransposeBackward0", (t([b, 16, s, 128]),), 2500))
    ops.append(ev("ScaledDotProductFlashAttentionBackward0",
                  (Op("aten::_scaled_dot_product_flash_attention_backward", 6000,
                      shapes([BF16] * 6, [[b, 16, s, 128]] * 6),
                      (Op("aten::_flash_attention_backward", 12000, shapes([BF16] * 6, [[b, s, 16, 128]] * 6),
                          (Op("aten::empty", 900, "", alloc=b * s * h * 2),) * 3,
                          kernels=(Kernel(K_FLASH_BWD_DOT, 45000, static_args=ew),
                                   Kernel(K_FLASH_BWD, 1_450_000, static_args=kargs(255, 98304, (16, 8, 16), (256, 1, 1), 12)),
                                   Kernel(K_FLASH_BWD_CVT, 28000, static_args=ew)),
                          alloc=b * s * h * 6),)),)))
    for _ in range(3):
        ops.append(ev("TransposeBackward0", (t([b, 16, s, 128]),), 2500))
        ops.append(ev("ViewBackward0", (Op("aten::view", 900, shapes([BF16, "ScalarList"], [x3, []])),), 2500))
    ops.append(ev("SplitBackward0", (Op("aten::cat", 9000, shapes(["TensorList", "Scalar"], [[], []]),
                                        kernels=(Kernel(K_CAT, 95000, static_args=ew),), alloc=b * s * h * 6),)))
    ops += addmm_bwd(3 * h, h, 360000)
    ops += ln_bwd()
    return ops


# --------------------------------------------------------------------------- #
# Step emission
# --------------------------------------------------------------------------- #


@dataclass
class State:
    """Counters that run across steps (ids grow monotonically like Kineto's)."""

    pid: int
    bwd_tid: int
    ext_id: int = 1
    ev_idx: int = 0
    corr: int = 100000
    seq: int = 18000
    fwdbwd: int = 0
    addr: int = 139725623001088
    allocated: int = 12 * 1024**3
    reserved: int = 40 * 1024**3
    stream_free: dict[int, int] = field(default_factory=lambda: {7: 0, 20: 0})


class StepWriter:
    """Emits one training step into the three Kineto sections."""

    def __init__(self, st: State, cpu: Section, mem: Section, gpu: Section, model: tuple) -> None:
        self.st = st
        self.cpu = cpu
        self.mem = mem
        self.gpu = gpu
        self.fwd, self.bwd_blocks, self.data, self.optim, self.item = model
        self.rng = random.Random(0)
        self.cpu_buf: list[str] = []
        self.gpu_buf: list[tuple[int, str, int]] = []
        self.first_kts = 0
        self.pending_fwdbwd: dict[str, list[int]] = {}

    # -- helpers ---------------------------------------------------------- #
    def jit(self, ns: int, spread: float = 0.5) -> int:
        """Jitter a duration: uniform in [1-spread/2, 1+spread/2] times ns, ns >= 1."""
        return max(1, int(ns * (1.0 - spread / 2 + spread * self.rng.random())))

    def _mem_event(self, tid: int, ts: int, nbytes: int) -> None:
        st = self.st
        st.allocated += nbytes
        st.ev_idx += 1
        st.addr += (nbytes + 511) // 512 * 512 if nbytes > 0 else 0
        self.mem.add(
            '  {\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",\n'
            f'    "pid": {st.pid}, "tid": {tid},\n    "ts": {fmt_us(ts)},\n    "args": {{\n'
            f'      "Total Reserved": {st.reserved}, "Total Allocated": {st.allocated}, "Bytes": {nbytes}, '
            f'"Device Id": 0, "Device Type": 1, "Addr": {st.addr}, "Ev Idx": {st.ev_idx}\n    }}\n  }},\n')

    def _launch(self, k: Kernel, tid: int, ts: int, ext: int) -> int:
        """Emit runtime call + flow + GPU activity; return the runtime call's end."""
        st = self.st
        st.corr += 1 + (self.rng.random() < 0.2)
        corr = st.corr
        rdur = self.jit(4200 if k.runtime != "cudaMemcpyAsync" else 9000, 0.8)
        s = k.stream
        kts = max(ts + self.jit(5500, 0.6), st.stream_free[s] + self.jit(1800, 0.8))
        kdur = self.jit(k.dur_ns, 0.3)
        st.stream_free[s] = kts + kdur
        if not self.first_kts:
            self.first_kts = kts
        pid = st.pid
        self.gpu_buf.append((ts, (
            f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "{k.runtime}", "pid": {pid}, "tid": {tid},\n'
            f'    "ts": {fmt_us(ts)}, "dur": {fmt_us(rdur)},\n    "args": {{\n'
            f'      "External id": {ext},      "cbid": {k.cbid}, "correlation": {corr}\n    }}\n  }},\n'
            f'  {{\n    "ph": "s", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {fmt_us(ts)},\n'
            f'    "cat": "ac2g", "name": "ac2g"\n  }},\n'
            f'  {{\n    "ph": "X", "cat": "{k.cat}", "name": "{k.name}", "pid": 0, "tid": {s},\n'
            f'    "ts": {fmt_us(kts)}, "dur": {fmt_us(kdur)},\n    "args": {{\n'
            f'      "External id": {ext},      "queued": 0, "device": 0, "context": 1,      '
            f'"stream": {s}, "correlation": {corr},      {k.static_args}\n    }}\n  }},\n'
            f'  {{\n    "ph": "f", "id": {corr}, "pid": 0, "tid": {s}, "ts": {fmt_us(kts)},\n'
            f'    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }},\n'), 4))
        return ts + rdur

    def op(self, o: Op, tid: int, ts: int, fwd: bool) -> int:
        """Emit op ``o`` starting at ``ts`` on ``tid`` (pre-order); return its end."""
        st = self.st
        idx = len(self.cpu_buf)
        self.cpu_buf.append("")
        ext = st.ext_id
        st.ext_id += 1
        ev = st.ev_idx
        st.ev_idx += 1
        seq_txt = ""
        flow_txt = ""
        if o.seq:
            if fwd:
                st.seq += 1
                seq_txt = f'"Sequence number": {st.seq}, "Fwd thread id": 0, '
                if o.bwd:
                    st.fwdbwd += 1
                    self.pending_fwdbwd.setdefault(o.bwd, []).append(st.fwdbwd)
                    flow_txt = (f'  {{\n    "ph": "s", "id": {st.fwdbwd}, "pid": {st.pid}, "tid": {tid}, '
                                f'"ts": {fmt_us(ts)},\n    "cat": "fwdbwd", "name": "fwdbwd"\n  }},\n')
            else:
                seq_txt = f'"Sequence number": {st.seq - self.rng.randrange(1, 400)}, "Fwd thread id": 1, '
                if o.bwd and o.name.startswith("autograd::") and self.pending_fwdbwd.get(o.bwd):
                    fid = self.pending_fwdbwd[o.bwd].pop()
                    flow_txt = (f'  {{\n    "ph": "f", "id": {fid}, "pid": {st.pid}, "tid": {tid}, '
                                f'"ts": {fmt_us(ts)},\n    "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"\n  }},\n')
        if flow_txt:
            self.cpu_buf.append(flow_txt)
        pre = self.jit(o.self_ns // 2)
        t = ts + pre
        for c in o.children:
            t = self.op(c, tid, t, fwd) + self.jit(700, 1.0)
        for k in o.kernels:
            t = self._launch(k, tid, t, ext) + self.jit(500, 1.0)
        if o.alloc:
            self._mem_event(tid, t, o.alloc)
            t += self.jit(300)
        end = t + self.jit(o.self_ns - o.self_ns // 2)
        args = o.args + ", " if o.args else ""
        rf = '"Record function id": 0, ' if o.cat == "cpu_op" else ""
        self.cpu_buf[idx] = (
            f'  {{\n    "ph": "X", "cat": "{o.cat}", "name": "{o.name}", "pid": {st.pid}, "tid": {tid},\n'
            f'    "ts": {fmt_us(ts)}, "dur": {fmt_us(end - ts)},\n    "args": {{\n'
            f'      "External id": {ext},{rf}{seq_txt}{args}"Ev Idx": {ev}\n    }}\n  }},\n')
        return end

    def annotation(self, name: str, tid: int, ts: int, end: int, cat: str = "user_annotation") -> str:
        st = self.st
        ext = st.ext_id
        st.ext_id += 1
        ev = st.ev_idx
        st.ev_idx += 1
        return (f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {st.pid}, "tid": {tid},\n'
                f'    "ts": {fmt_us(ts)}, "dur": {fmt_us(end - ts)},\n    "args": {{\n'
                f'      "External id": {ext},"Ev Idx": {ev}\n    }}\n  }},\n')

    def gpu_annotation(self, name: str, ts: int, end: int, ext: int) -> str:
        return (f'  {{\n    "ph": "X", "cat": "gpu_user_annotation", "name": "{name}", "pid": 0, "tid": 7,\n'
                f'    "ts": {fmt_us(ts)}, "dur": {fmt_us(end - ts)},\n    "args": {{\n'
                f'      "External id": {ext}\n    }}\n  }},\n')

    def counter(self, ts: int) -> str:
        st = self.st
        return (f'  {{\n    "ph": "C", "name": "GPU 0 Memory", "pid": 0, "tid": 0, "ts": {fmt_us(ts)},\n'
                f'    "args": {{\n      "Allocated (MB)": {st.allocated / MIB:.3f}, '
                f'"Reserved (MB)": {st.reserved / MIB:.3f}\n    }}\n  }},\n')

    # -- one step ---------------------------------------------------------- #
    def step(self, n: int, seed: int, ts: int) -> int:
        """Emit ProfilerStep#n starting at ``ts``; return the step's end."""
        self.rng = random.Random(seed * 1_000_003 + n)
        st = self.st
        pid, main, bwd_tid = st.pid, st.pid, st.bwd_tid
        self.cpu_buf = []
        self.gpu_buf = []
        self.pending_fwdbwd = {}
        step_idx = len(self.cpu_buf)
        self.cpu_buf.append("")  # ProfilerStep#n, filled at the end
        step_ext = st.ext_id
        st.ext_id += 1
        step_ev = st.ev_idx
        st.ev_idx += 1
        self.first_kts = 0
        counters = [self.counter(ts + 1000)]

        t = ts + self.jit(20000)
        zg_ts = t
        t += self.jit(250000)
        self.cpu_buf.append(self.annotation("Optimizer.zero_grad#AdamW.zero_grad", main, zg_ts, t))
        t = self.op(self.data, main, t + self.jit(5000), True)
        fwd_ann = len(self.cpu_buf)
        self.cpu_buf.append("")
        fwd_ts = t = t + self.jit(8000)
        for o in self.fwd:
            t = self.op(o, main, t, True) + self.jit(1500, 1.0)
        fwd_end = t
        self.cpu_buf[fwd_ann] = self.annotation("## forward ##", main, fwd_ts, fwd_end)
        fwd_cpu = self.cpu_buf

        # Backward on the autograd thread: starts when the main thread calls backward().
        self.cpu_buf = []
        tb = fwd_end + self.jit(60000)
        bucket = 0
        for i, block in enumerate(self.bwd_blocks):
            for o in block:
                tb = self.op(o, bwd_tid, tb, False) + self.jit(1200, 1.0)
            bucket += 1
            if (i > 0 and bucket == 3) or i == len(self.bwd_blocks) - 1:
                bucket = 0
                # DDP gradient bucket all-reduce on the comm stream.
                st.stream_free[20] = max(st.stream_free[20], st.stream_free[7])
                nccl = Op("nccl:all_reduce", 9000, "", (Op("record_param_comms", 12000, "", kernels=(
                    Kernel(K_NCCL, self.jit(2_600_000), stream=20, runtime="cudaLaunchKernelExC", cbid=430,
                           static_args=kargs(96, 0, (32, 1, 1), (640, 1, 1), 4)),)),))
                tb = self.op(nccl, bwd_tid, tb, False) + self.jit(2000, 1.0)
        bwd_cpu = self.cpu_buf
        self.cpu_buf = fwd_cpu

        # Main thread: blocked in backward() until the autograd thread is done.
        bwd_ann = self.annotation("## backward ##", main, fwd_end + self.jit(20000), tb + self.jit(30000))
        self.cpu_buf.append(bwd_ann)
        t = tb + self.jit(60000)
        # The optimizer must wait for the all-reduce (cudaStreamWaitEvent on stream 7).
        st.stream_free[7] = max(st.stream_free[7], st.stream_free[20])
        opt_gpu0 = max(st.stream_free[7], t)
        opt_ext = st.ext_id
        t = self.op(self.optim, main, t, True)
        opt_gpu1 = st.stream_free[7]
        counters.append(self.counter(t))
        t = self.op(self.item, main, t + self.jit(10000), True)
        # cudaStreamSynchronize blocks until the GPU has drained both streams.
        gpu_end = max(st.stream_free.values())
        st.corr += 1
        sync_dur = max(gpu_end - t, 0) + self.jit(12000)
        self.gpu_buf.append((t, (
            f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": {pid}, '
            f'"tid": {main},\n    "ts": {fmt_us(t)}, "dur": {fmt_us(sync_dur)},\n    "args": {{\n'
            f'      "External id": {st.ext_id - 1},      "cbid": 131, "correlation": {st.corr}\n    }}\n  }},\n'), 1))
        t += sync_dur + self.jit(40000)
        end = t
        self.cpu_buf[step_idx] = (
            f'  {{\n    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{n}", "pid": {pid}, "tid": {main},\n'
            f'    "ts": {fmt_us(ts)}, "dur": {fmt_us(end - ts)},\n    "args": {{\n'
            f'      "External id": {step_ext},"Record function id": 0, "Ev Idx": {step_ev}\n    }}\n  }},\n')

        for s in self.cpu_buf:
            self.cpu.add(s)
        for s in bwd_cpu:
            self.cpu.add(s)
        # Kineto writes runtime/GPU records roughly in correlation order.
        for _, s, cnt in self.gpu_buf:
            self.gpu.parts.append(s)
            self.gpu.pending += len(s)
            self.gpu.events += cnt
        assert not any(self.pending_fwdbwd.values()), "unpaired fwdbwd flow"
        self.gpu.add(self.gpu_annotation(f"ProfilerStep#{n}", self.first_kts, gpu_end, step_ext))
        self.gpu.add(self.gpu_annotation("Optimizer.step#AdamW.step", opt_gpu0, opt_gpu1, opt_ext))
        for c in counters:
            self.gpu.add(c)
        return end


# --------------------------------------------------------------------------- #
# Header and trailer
# --------------------------------------------------------------------------- #


def header(seed: int, ngpus: int = 8) -> str:
    dev = []
    for i in range(ngpus):
        dev.append(
            f'    {{\n      "id": {i}, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85031714816,\n'
            '      "computeMajor": 9, "computeMinor": 0,\n'
            '      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
            '      "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32,\n'
            '      "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 233472,\n'
            '      "numSms": 132, "sharedMemPerBlockOptin": 232448\n    }')
    dist = {"backend": "nccl", "rank": 0, "world_size": ngpus, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                           "pg_size": ngpus, "ranks": list(range(ngpus))}], "nccl_version": "2.21.5"}
    return ('\n{\n  "schemaVersion": 1,\n  "deviceProperties": [\n' + ",\n".join(dev) + "\n  ],\n"
            f'  "distributedInfo": {json.dumps(dist)},\n  "traceEvents": [\n')


def trailer(st: State, t_first: int, t_last: int, seed: int) -> tuple[str, int]:
    """Kineto's closing block: M events, the Spans slice, two global instants, keys."""
    ev: list[str] = []
    mts = fmt_us(t_first + 1200)

    def meta(name: str, pid: int | str, tid: int, key: str, val: str | int) -> None:
        v = json.dumps(val)
        p = json.dumps(pid)
        ev.append(f'  {{\n    "name": "{name}", "ph": "M", "ts": {mts}, "pid": {p}, "tid": {tid},\n'
                  f'    "args": {{\n      "{key}": {v}\n    }}\n  }}')

    meta("process_name", st.pid, 0, "name", "python3")
    meta("process_labels", st.pid, 0, "labels", "CPU")
    meta("process_sort_index", st.pid, 0, "sort_index", st.pid)
    for g in range(8):
        meta("process_name", g, 0, "name", "python3")
        meta("process_labels", g, 0, "labels", f"GPU {g}")
        meta("process_sort_index", g, 0, "sort_index", 5000000 + g)
    for stream in (7, 20):
        meta("thread_name", 0, stream, "name", f"stream {stream} ")
        meta("thread_sort_index", 0, stream, "sort_index", stream)
    meta("thread_name", st.pid, st.pid, "name", f"thread {st.pid} (python3)")
    meta("thread_sort_index", st.pid, st.pid, "sort_index", st.pid)
    meta("thread_name", st.pid, st.bwd_tid, "name", f"thread {st.bwd_tid} (pt_autograd_0)")
    meta("thread_sort_index", st.pid, st.bwd_tid, "sort_index", st.bwd_tid)
    ev.append(f'  {{\n    "ph": "X", "cat": "Trace", "ts": {fmt_us(t_first)}, "dur": {fmt_us(t_last - t_first)},\n'
              '    "pid": "Spans", "tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n'
              '    "args": {\n      "Op count": 0\n    }\n  }')
    ev.append(f'  {{\n    "name": "process_sort_index", "ph": "M", "ts": {fmt_us(t_first)},\n'
              '    "pid": "Spans", "tid": 0,\n    "args": {\n      "sort_index": 536870912\n    }\n  }')
    ev.append('  {\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
              f'    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {fmt_us(t_first)}\n  }}')
    ev.append('  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
              f'    "pid": "", "tid": "", "ts": {fmt_us(t_last + 5000)}\n  }}')
    tail = (",\n".join(ev) + "\n  ],\n"
            f'  "traceName": "/tmp/libkineto_activities_{st.pid}.json",\n'
            '  "displayTimeUnit": "ms",\n'
            '  "baseTimeNanoseconds": 1751410836000000000\n}\n')
    return tail, len(ev)


# --------------------------------------------------------------------------- #
# Driver
# --------------------------------------------------------------------------- #


def generate(out: str, size_bytes: int | None, events: int | None, seed: int, layers: int,
             gzip_level: int = 1, quiet: bool = False) -> dict[str, object]:
    """Write the trace; stop at the first step boundary reaching the size or event target.

    Returns a summary (events, bytes, steps, span) for callers such as bench_reduce.
    """
    t_start = time.perf_counter()
    rng = random.Random(seed)
    pid = 2000 + rng.randrange(60000)
    st = State(pid=pid, bwd_tid=pid + 160)
    model = build_model(layers)
    outdir = os.path.dirname(os.path.abspath(out))
    sink = GzipSink(out + ".partial", gzip_level, out.endswith(".gz"))
    tmpdir = tempfile.mkdtemp(prefix=".gen_kineto_", dir=outdir)
    mem_f = open(os.path.join(tmpdir, "mem"), "wb")  # noqa: SIM115 - closed below
    gpu_f = open(os.path.join(tmpdir, "gpu"), "wb")  # noqa: SIM115 - closed below
    try:
        head = header(seed)
        sink.write(head.encode())
        cpu, mem, gpu = Section(sink), Section(mem_f), Section(gpu_f)
        w = StepWriter(st, cpu, mem, gpu, model)
        t0 = 1_420_179_484_778_337  # ns, like a CLOCK_MONOTONIC-based Kineto ts
        for s in (7, 20):
            st.stream_free[s] = t0
        t = t0 + 95_000
        n = 0
        tail_est = 12_000
        last_report = time.perf_counter()
        while True:
            t = w.step(n, seed, t) + w.jit(30000)
            n += 1
            nbytes = len(head) + cpu.bytes + cpu.pending + mem.bytes + mem.pending + gpu.bytes + gpu.pending + tail_est
            nev = cpu.events + mem.events + gpu.events + 40
            if (size_bytes is not None and nbytes >= size_bytes) or (events is not None and nev >= events):
                break
            if not quiet and time.perf_counter() - last_report > 5:
                last_report = time.perf_counter()
                what = f"{nbytes / MIB:.0f}/{size_bytes / MIB:.0f} MiB" if size_bytes else f"{nev}/{events} events"
                print(f"  step {n}: {what}", file=sys.stderr, flush=True)
        cpu.flush()
        mem.flush()
        gpu.flush()
        mem_f.close()
        gpu_f.close()
        for name in ("mem", "gpu"):
            with open(os.path.join(tmpdir, name), "rb") as fh:
                while chunk := fh.read(16 * MIB):
                    sink.write(chunk)
        tail, ntail = trailer(st, t0, t, seed)
        sink.write(tail.encode())
        sink.close()
        os.replace(out + ".partial", out)
    finally:
        for name in ("mem", "gpu"):
            p = os.path.join(tmpdir, name)
            if os.path.exists(p):
                os.unlink(p)
        os.rmdir(tmpdir)
        if os.path.exists(out + ".partial"):
            os.unlink(out + ".partial")
    total_events = cpu.events + mem.events + gpu.events + ntail
    return {
        "path": out,
        "events": total_events,
        "bytes": sink.raw_bytes,
        "gzip_bytes": os.path.getsize(out),
        "steps": n,
        "span_us": (t + 5000 - t0) / 1000,
        "seconds": round(time.perf_counter() - t_start, 2),
        "seed": seed,
        "layers": layers,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--size-mb", type=float, help="target uncompressed size in MiB (default 1024)")
    g.add_argument("--events", type=int, help="target event count (stops at the first step boundary past it)")
    ap.add_argument("-o", "--output", required=True, help="output path; gzip if it ends in .gz")
    ap.add_argument("--seed", type=int, default=1, help="RNG seed (default 1)")
    ap.add_argument("--layers", type=int, default=12, help="transformer blocks per step (default 12)")
    ap.add_argument("--gzip-level", type=int, default=1, choices=range(4), help="isal level 0-3 (default 1)")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    size = None if a.events is not None else int((a.size_mb if a.size_mb is not None else 1024) * MIB)
    info = generate(a.output, size, a.events, a.seed, a.layers, a.gzip_level, a.quiet)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
