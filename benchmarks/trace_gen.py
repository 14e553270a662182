"""A SYNTHETIC, real-shaped PyTorch profiler (Kineto) trace of a VLM training step, of any size.

``write_trace(path, target_bytes, seed=0, rank=0)`` writes ``.json`` (or ``.json.gz``) text laid out as
libkineto's ``ChromeTraceLogger`` writes it (facts: pytorch/kineto ``libkineto/src/output_json.cpp``): the
top-level object with ``schemaVersion``, ``deviceProperties``, ``distributedInfo``, then ``traceEvents`` with
one multi-line object per event (``"ph"``, ``"cat"``, ``"name"``, ``"pid"``, ``"tid"`` on the first line,
``"ts"`` / ``"dur"`` in microseconds with three decimals, an ``"args"`` block), process / thread metadata
events, the ``Trace`` span with string pid / tid, instant events and ``traceName`` last.

Per ``ProfilerStep#N`` (a Qwen2-VL-shaped model: vision blocks, a patch merger, decoder layers):

* data loading (``enumerate(DataLoader)#...`` with ``aten::to`` / ``aten::copy_`` and HtoD memcpys);
* the forward pass on the main thread: ``python_function`` frames (``torch/nn/modules/module.py(1747):
  _call_impl``, ``modeling_qwen2_vl.py(...): forward``) around ``nn.Module: <Class>_<k>`` events around
  ATen ops (``aten::linear`` -> ``aten::t`` + ``aten::addmm`` with ``Input Dims``, ``aten::layer_norm``,
  ``aten::_scaled_dot_product_flash_attention``, ...), each launching kernels through
  ``cudaLaunchKernel`` (``correlation``, ``External id``, ``ac2g`` flow start / end pairs);
* the backward pass on the autograd thread: ``autograd::engine::evaluate_function: XBackward0`` with the
  forward op's ``Sequence number`` and ``Fwd thread id``, ``fwdbwd`` flows, the backward kernels;
* gradient all-reduce (``record_param_comms``, ``nccl:all_reduce``, ``ncclDevKernel_AllReduce_...`` on the
  NCCL stream, overlapping backward compute), memsets, the optimizer (``Optimizer.step#AdamW.step``,
  ``multi_tensor_apply_kernel``), ``gpu_user_annotation`` ranges on the device.

Names are plausible, times invented (seeded ``random.Random``): nothing here was measured on a GPU.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

__all__ = ["write_trace", "GENERATOR"]

GENERATOR = "benchmarks/trace_gen.py write_trace"

_MAIN, _BWD, _PID = 171806, 171912, 171806
_STREAM, _NCCL_STREAM = 7, 21
_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
_ELEMWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
             "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)")
_NORM = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
         "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)")
_FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"
_FLASH_BWD = "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>, true, false, false, false, false, false>(pytorch_flash::Flash_bwd_params)"
_GELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
         "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, "
         "at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
         "{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)")
_ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, "
         "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, "
         "double, double, double, double, bool, double*, double*>(at::native::(anonymous namespace)::TensorListMetadata<4>, "
         "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, "
         "double, double, double, double, bool, double*, double*)")
_NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
_HF = "transformers/models/qwen2_vl/modeling_qwen2_vl.py"


def _t(x: float) -> str:
    ns = int(round(x * 1000))
    return f"{ns // 1000}.{ns % 1000:03d}"


class _Writer:
    def __init__(self, fh, rng: random.Random) -> None:
        self.fh, self.rng = fh, rng
        self.first = True
        self.corr = 1000
        self.ext = 10
        self.seq = 0
        self.py_id = 0
        self.gpu = 0.0      # the compute stream's clock (µs)
        self.events = 0
        self.buf: list[str] = []

    def put(self, text: str) -> None:
        self.buf.append(("\n" if self.first else ",\n") + text)
        self.first = False
        self.events += 1
        if len(self.buf) > 4096:
            self.flush()

    def flush(self) -> None:
        self.fh.write("".join(self.buf))
        self.buf.clear()

    def x(self, cat: str, name: str, pid, tid, ts: float, dur: float, args: str = "") -> None:
        a = f',\n    "args": {{\n      {args}\n    }}' if args else ""
        self.put(f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n'
                 f'    "ts": {_t(ts)}, "dur": {_t(dur)}{a}\n  }}')

    def flow(self, ph: str, fid: int, pid, tid, ts: float, cat: str) -> None:
        bp = ', "bp": "e"' if ph == "f" else ""
        self.put(f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, "ts": {_t(ts)},\n'
                 f'    "cat": "{cat}", "name": "{cat}"{bp}\n  }}')

    def py(self, name: str, ts: float, dur: float, tid: int = _MAIN) -> None:
        self.py_id += 1
        self.x("python_function", name, _PID, tid, ts, dur,
               f'"Python parent id": {max(0, self.py_id - 3)}, "Python id": {self.py_id}, "Python thread": 0')

    def launch(self, kernel: str, t: float, cat: str = "kernel", stream: int = _STREAM, tid: int = _MAIN,
               runtime: str = "cudaLaunchKernel") -> float:
        """A runtime call at ``t`` and its device activity; returns the host time after the call."""
        rng = self.rng
        self.corr += 1
        c = self.corr
        self.x("cuda_runtime", runtime, _PID, tid, t, 4.2 + rng.random(),
               f'"External id": {self.ext}, "cbid": 211, "correlation": {c}')
        self.flow("s", c, _PID, tid, t + 0.1, "ac2g")
        start = max(self.gpu, t + 6.0) + rng.uniform(0.2, 1.5)
        dur = rng.uniform(8, 60) if cat == "kernel" else rng.uniform(1, 4)
        args = (f'"External id": {self.ext},\n      "queued": 0, "device": 0, "context": 1,\n      "stream": {stream}, '
                f'"correlation": {c},\n      "registers per thread": 168,\n      "shared memory": 213248,\n'
                f'      "blocks per SM": 1.0,\n      "warps per SM": 12.0,\n      "grid": [132, 1, 1],\n'
                f'      "block": [384, 1, 1],\n      "est. achieved occupancy %": 19'
                if cat == "kernel" else
                f'"External id": {self.ext},\n      "device": 0, "context": 1,\n      "stream": {stream}, '
                f'"correlation": {c},\n      "bytes": 2097152, "memory bandwidth (GB/s)": 1530.2')
        self.x(cat, kernel, 0, stream, start, dur, args)
        self.flow("f", c, 0, stream, start, "ac2g")
        if stream == _STREAM:
            self.gpu = start + dur
        return t + 5.5

    def op(self, name: str, t: float, kernels=(), dims: str = "", children=(), fwd: bool = True,
           tid: int = _MAIN) -> float:
        """An ATen op at ``t``: its children ops, then its launches; returns its end."""
        self.ext += 1
        ext = self.ext
        seq = ""
        if fwd and tid == _MAIN:
            self.seq += 1
            seq = f', "Sequence number": {self.seq}, "Fwd thread id": 0'
        start = t
        t += 1.0
        for child in children:
            t = self.op(child, t, fwd=False, tid=tid) + 0.3
        for k in kernels:
            t = self.launch(k, t, tid=tid) + 0.4
        t += 1.0
        shapes = f', "Input Dims": {dims}, "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]' if dims else ""
        self.x("cpu_op", name, _PID, tid, start, t - start, f'"External id": {ext}, "Record function id": 0, '
               f'"Ev Idx": {self.events}{seq}{shapes}')
        return t


def _linear(w: _Writer, t: float, tokens: int, d_in: int, d_out: int, cls: str, k: int) -> float:
    """``nn.Module: Linear_k`` > ``aten::linear`` > (``aten::t``, ``aten::addmm`` launching a GEMM)."""
    s = t
    w.ext += 1
    ext = w.ext
    w.seq += 1
    seq = w.seq
    t = w.op("aten::t", t + 2.0, fwd=False, children=("aten::transpose",))
    t = w.op("aten::addmm", t + 0.3, kernels=(_GEMM,), dims=f"[[{d_out}], [{tokens}, {d_in}], [{d_in}, {d_out}]]")
    w.x("cpu_op", "aten::linear", _PID, _MAIN, s + 1.0, t - s, f'"External id": {ext}, "Record function id": 0, '
        f'"Ev Idx": {w.events}, "Sequence number": {seq}, "Fwd thread id": 0, "Input Dims": [[{tokens}, {d_in}], '
        f'[{d_out}, {d_in}], [{d_out}]], "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]')
    w.x("python_function", f"nn.Module: {cls}_{k}", _PID, _MAIN, s, t - s + 2.0,
        f'"Python parent id": {w.py_id}, "Python id": {w.py_id + 1}, "Python module id": {k}')
    w.py_id += 1
    return t + 3.5


def _module(w: _Writer, cls: str, k: int, t: float, body) -> float:
    """``_call_impl`` frame > ``nn.Module: cls_k`` > ``forward`` frame > body."""
    s = t
    t = body(t + 3.0)
    w.py("torch/nn/modules/module.py(1747): _call_impl", s, t - s + 3.0)
    w.x("python_function", f"nn.Module: {cls}_{k}", _PID, _MAIN, s + 0.5, t - s + 2.0,
        f'"Python parent id": {w.py_id}, "Python id": {w.py_id + 1}, "Python module id": {k}')
    w.py_id += 1
    w.py(f"{_HF}({w.rng.randrange(200, 1900)}): forward", s + 1.0, t - s + 1.0)
    return t + 3.5


def _block(w: _Writer, t: float, vision: bool, k: int, tokens: int, d: int) -> float:
    prefix = "Vision" if vision else "Qwen2VL"

    def attn(t: float) -> float:
        for j in range(3 if not vision else 1):
            t = _linear(w, t, tokens, d, d if vision is False else 3 * d, "Linear", 4 * k + j)
        t = w.op("aten::_scaled_dot_product_flash_attention", t, kernels=(_FLASH,),
                 dims=f"[[1, 16, {tokens}, 128], [1, 16, {tokens}, 128], [1, 16, {tokens}, 128]]")
        return _linear(w, t, tokens, d, d, "Linear", 4 * k + 3)

    def mlp(t: float) -> float:
        t = _linear(w, t, tokens, d, 4 * d, "Linear", 8 * k)
        t = w.op("aten::gelu", t, kernels=(_GELU,))
        return _linear(w, t, tokens, 4 * d, d, "Linear", 8 * k + 1)

    def body(t: float) -> float:
        t = w.op("aten::layer_norm", t, kernels=(_NORM,), children=("aten::native_layer_norm",))
        t = _module(w, f"{prefix}Attention" if not vision else "VisionAttention", k, t, attn)
        t = w.op("aten::add", t, kernels=(_ELEMWISE,))
        t = w.op("aten::layer_norm", t, kernels=(_NORM,), children=("aten::native_layer_norm",))
        t = _module(w, "Qwen2MLP" if not vision else "VisionMlp", k, t, mlp)
        return w.op("aten::add", t, kernels=(_ELEMWISE,))

    return _module(w, "Qwen2VLVisionBlock" if vision else "Qwen2VLDecoderLayer", k, t, body)


_BWD_OPS = (("AddmmBackward0", ("aten::mm", "aten::mm"), (_GEMM, _GEMM)),
            ("ScaledDotProductFlashAttentionBackward0", ("aten::_scaled_dot_product_flash_attention_backward",),
             (_FLASH_BWD,)),
            ("NativeLayerNormBackward0", ("aten::native_layer_norm_backward",), (_NORM,)),
            ("GeluBackward0", ("aten::gelu_backward",), (_GELU,)),
            ("AddBackward0", (), ()))


def _step(w: _Writer, step: int, t: float, vision_blocks: int, layers: int) -> float:
    rng = w.rng
    s0 = t
    # data loading
    dl = t + 2.0
    t = dl + 3.0
    for _ in range(3):
        t = w.op("aten::to", t, fwd=False, children=("aten::_to_copy",))
        t = w.launch("Memcpy HtoD (Pageable -> Device)", t, cat="gpu_memcpy", runtime="cudaMemcpyAsync")
    w.x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", _PID, _MAIN, dl, t - dl + 1,
        f'"External id": {w.ext}')
    t += 5.0
    seq0 = w.seq
    fwd0 = t

    def model(t: float) -> float:
        def visual(t: float) -> float:
            t = _module(w, "PatchEmbed", 0, t, lambda t: w.op("aten::conv3d", t, kernels=(_GEMM,)))
            for k in range(vision_blocks):
                t = _block(w, t, True, k, 1024, 1280)
            return _module(w, "PatchMerger", 0, t, lambda t: _linear(w, t, 256, 5120, 3584, "Linear", 900))

        t = _module(w, "Qwen2VisionTransformerPretrainedModel", 0, t, visual)

        def text(t: float) -> float:
            t = _module(w, "Embedding", 0, t, lambda t: w.op("aten::embedding", t, kernels=(_ELEMWISE,)))
            for k in range(layers):
                t = _block(w, t, False, k, 2048, 3584)
            return t

        t = _module(w, "Qwen2VLModel", 0, t, text)
        return _linear(w, t, 2048, 3584, 151936, "Linear", 999)  # lm_head

    t = _module(w, "Qwen2VLForConditionalGeneration", 0, t, model)
    t = w.op("aten::cross_entropy_loss", t, kernels=(_ELEMWISE, _ELEMWISE))
    w.x("user_annotation", "## forward ##", _PID, _MAIN, fwd0 - 1, t - fwd0 + 2, f'"External id": {w.ext}')
    # backward on the autograd thread, newest forward op first; all-reduce buckets launched along the way
    bt = t + 10.0
    w.gpu = max(w.gpu, bt)
    nccl_gpu = w.gpu
    seqs = list(range(w.seq, seq0, -1))
    for i, sq in enumerate(seqs):
        node, ops, kernels = _BWD_OPS[sq % len(_BWD_OPS)]
        w.ext += 1
        s = bt
        w.flow("f", sq, _PID, _BWD, s + 0.2, "fwdbwd")
        bt += 1.0
        inner = bt
        for o, k in zip(ops, kernels):
            bt = w.op(o, bt, kernels=(k,), fwd=False, tid=_BWD) + 0.3
        bt += 1.0
        w.x("cpu_op", node, _PID, _BWD, inner - 0.5, bt - inner + 0.5,
            f'"External id": {w.ext}, "Record function id": 0, "Sequence number": {sq}, "Fwd thread id": 1')
        w.x("cpu_op", f"autograd::engine::evaluate_function: {node}", _PID, _BWD, s, bt - s + 0.5,
            f'"External id": {w.ext}, "Record function id": 0, "Sequence number": {sq}, "Fwd thread id": 1')
        bt += 1.0
        if i % 400 == 399 or i == len(seqs) - 1:  # a gradient bucket is ready: all-reduce it on the NCCL stream
            w.ext += 1
            cs = bt
            w.corr += 1
            c = w.corr
            w.x("cuda_runtime", "cudaLaunchKernelExC", _PID, _BWD, bt + 2, 5.0,
                f'"External id": {w.ext}, "cbid": 430, "correlation": {c}')
            ks = max(nccl_gpu, bt + 8) + rng.uniform(1, 5)
            kd = rng.uniform(300, 900)
            w.x("kernel", _NCCL, 0, _NCCL_STREAM, ks, kd,
                f'"External id": {w.ext},\n      "queued": 0, "device": 0, "context": 1,\n      "stream": {_NCCL_STREAM}, '
                f'"correlation": {c},\n      "registers per thread": 96,\n      "shared memory": 4224,\n'
                f'      "grid": [2, 1, 1],\n      "block": [640, 1, 1],\n      "Collective name": "allreduce", '
                f'"In msg nelems": 25000000, "Out msg nelems": 25000000, "Group size": 8, "dtype": "BFloat16"')
            nccl_gpu = ks + kd
            bt += 9.0
            w.x("user_annotation", "nccl:all_reduce", _PID, _BWD, cs + 1, bt - cs - 1.5, f'"External id": {w.ext}')
            w.x("cpu_op", "record_param_comms", _PID, _BWD, cs, bt - cs,
                f'"External id": {w.ext}, "Record function id": 0, "Collective name": "allreduce", '
                f'"dtype": "BFloat16", "In msg nelems": 25000000, "Out msg nelems": 25000000, "Group size": 8')
            bt += 1.0
    t = max(bt, w.gpu, nccl_gpu) + 20.0
    # zero_grad memsets and the optimizer
    for _ in range(4):
        t = w.launch("Memset (Device)", t, cat="gpu_memset", runtime="cudaMemsetAsync") + 0.5
    o0 = t
    for _ in range(6):
        t = w.op("aten::_fused_adamw_", t, kernels=(_ADAM, _ADAM), fwd=False) + 0.5
    w.x("user_annotation", "Optimizer.step#AdamW.step", _PID, _MAIN, o0 - 1, t - o0 + 2, f'"External id": {w.ext}')
    w.x("gpu_user_annotation", "Optimizer.step#AdamW.step", 0, _STREAM, o0 + 6, max(w.gpu, t) - o0 - 5,
        f'"External id": {w.ext}')
    t = max(t, w.gpu) + 15.0
    w.x("user_annotation", f"ProfilerStep#{step}", _PID, _MAIN, s0, t - s0, f'"External id": {w.ext}')
    return t + 4.0


def write_trace(path: str | Path, target_bytes: int, seed: int = 0, rank: int = 0, world_size: int = 8,
                vision_blocks: int = 32, layers: int = 28) -> dict:
    """Write a synthetic trace of about ``target_bytes`` (whole steps); returns its facts (events, steps, size)."""
    path = Path(path)
    rng = random.Random(seed)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as fh:  # type: ignore[operator]
        fh.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {\n      "id": 0, "name": "NVIDIA H100 80GB HBM3", '
                 '"totalGlobalMem": 85029158912,\n      "computeMajor": 9, "computeMinor": 0,\n      '
                 '"maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n      "regsPerBlock": 65536, '
                 '"warpSize": 32,\n      "sharedMemPerBlock": 49152, "numSms": 132,\n      '
                 '"regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472\n'
                 '    }\n  ],\n'
                 f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world_size}, "pg_count": 1, '
                 f'"pg_config": [{{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", '
                 f'"pg_size": {world_size}, "ranks": {list(range(world_size))}}}], "nccl_version": "2.21.5"}},\n'
                 '  "cuda_runtime_version": 12040,\n  "cuda_driver_version": 12040,\n'
                 f'  "trace_id": "SYNTHETIC-{seed:08d}-{rank:04d}",\n  "displayTimeUnit": "ms",\n'
                 '  "baseTimeNanoseconds": 1759300000000000000,\n  "traceEvents": [')
        w = _Writer(fh, rng)
        t0 = 3_914_000_000.0 + rng.uniform(0, 1000)
        for name, tid in (("python3", _MAIN), ("pt_autograd_0", _BWD)):
            w.put(f'  {{\n    "name": "thread_name", "ph": "M", "ts": {_t(t0)}, "pid": {_PID}, "tid": {tid},\n'
                  f'    "args": {{\n      "name": "{name}"\n    }}\n  }}')
        w.put(f'  {{\n    "name": "process_name", "ph": "M", "ts": {_t(t0)}, "pid": 0, "tid": 0,\n'
              f'    "args": {{\n      "name": "python3"\n    }}\n  }}')
        t = t0 + 50.0
        w.gpu = t
        step = 0
        while True:
            t = _step(w, step, t, vision_blocks, layers)
            step += 1
            w.flush()
            written = fh.tell() if not path.name.endswith(".gz") else w.events * 205  # ~bytes per event
            if written >= target_bytes:
                break
        w.put(f'  {{\n    "ph": "X", "cat": "Trace", "ts": {_t(t0)}, "dur": {_t(t - t0)},\n    "pid": "Spans", '
              f'"tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n    "args": {{\n      "Op count": 0\n'
              '    }\n  }')
        w.put(f'  {{\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n    "pid": "Traces", '
              f'"tid": "Trace PyTorch Profiler", "ts": {_t(t0)}\n  }}')
        w.put(f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", "ts": {_t(t + 10)}\n  }}')
        w.flush()
        fh.write(f'\n  ],\n  "traceName": "SYNTHETIC {GENERATOR} seed={seed} rank={rank}"\n}}')
        events = w.events
    return {"path": str(path), "events": events, "steps": step, "size": path.stat().st_size, "seed": seed,
            "generator": GENERATOR}
