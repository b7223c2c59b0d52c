#!/usr/bin/env python3
"""tools/diff_ort.py: differential fuzzer, kiln (through the ONNXIFI ABI) against onnxruntime.

Generates small single-node ONNX models (and a few 2-3 node chains) for the
operators kiln implements, with randomized spec-valid shapes, dtypes, attributes
and opset versions (7..17), random inputs (some with NaN, +-inf, +-0, denormals),
runs each on onnxruntime and on each kiln backend, and compares the outputs
(floats within a tolerance scaled to the op, integers and bools exactly, NaN
positions equal). Where kiln and onnxruntime disagree (or onnxruntime refuses
the model) onnx.reference.ReferenceEvaluator is run too and the record says
which side it agrees with.

Every kiln backend (and onnxruntime) runs in a worker subprocess of its own,
so a crash or a hang is caught and reported, and KILN_DEVICE takes effect
before the plugin is loaded. A crashed worker is restarted.

Usage:
  python tools/diff_ort.py --seed 1 --cases 2000 --backends reference,cpu --out /tmp/f1
  python tools/diff_ort.py --cases 3000 --backends reference,cpu,opencl-pocl:10,opencl-rusticl:10
        ("name:K" runs that backend on every K-th case only)
  python tools/diff_ort.py --ops Conv,MaxPool --cases 200 --chains 0.1
  python tools/diff_ort.py --seed 1 --case 1234 -v        (regenerate and rerun one case)
  python tools/diff_ort.py --replay DIR                    (DIR/model.onnx + DIR/inputs.npz)
  python tools/diff_ort.py --list-ops

Backends: reference, cpu, cpu-base (KILN_CPU_ISA=base), opencl-pocl, opencl-rusticl.
Output (--out): log.jsonl (one record per case and backend), summary.json,
and for every finding a reproducer directory <case>_<op>_<backend>/ with
model.onnx, inputs.npz, expected.npz (onnxruntime, or the reference evaluator),
kiln.npz (when kiln ran) and info.json.

The generator is deterministic: case i of seed s is made from its own RNG
(seed, i), so "--seed s --case i" (with the same --ops list; --backends does
not matter) regenerates it. Besides the plain run, every kiln graph is run
again on the same inputs (the outputs must repeat bit for bit) and, where
onnxruntime can give the expected values, on a second feed set: new float
values, new values for shape-like integer inputs fed as graph inputs
(Reshape's shape, Slice's starts, Tile's repeats, TopK's k, ...), and for a
one-input elementwise/reduction case with symbolic dims, new sizes.

Oracles, in order: onnxruntime (all graph optimizations off, one thread);
where it refuses, onnxruntime on an equivalent model (float64/float16 graphs
computed in float32, RNN layout=1 as layout 0 between Transposes), a numpy
oracle for a few ops, then the ONNX reference evaluator. Float tolerance
classes: exact (data movement, Max/Min, comparisons), ew (elementwise math,
rtol 1e-5), acc (accumulations, rtol 1e-4 with atol scaled by the output's
magnitude); float16 and float64 have their own. Elements the spec leaves
undefined (a float cast to an integer out of range, an integer Pow that
overflows) are masked. Records carry flags (nan, inf, huge = |x| > 1e15 in an
input or initializer) so NaN-propagation and float32-overflow differences
can be told apart from plain ones.

Reading summary.json: findings are grouped by (backend, result, op,
verdict, flags); verdict ref=kiln means the reference evaluator sides with
kiln against onnxruntime, ref=ort the reverse.
"""
import argparse
import hashlib
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
import traceback

import numpy as np

def _c(a):
    """C-contiguous, keeping 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.asarray(a, order="C")


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_LIB = os.path.join(ROOT, "build", "plugin", "libonnxifi-kiln.so")

BACKENDS = {
    "reference": {"KILN_DEVICE": "reference"},
    "cpu": {"KILN_DEVICE": "cpu"},
    "cpu-base": {"KILN_DEVICE": "cpu", "KILN_CPU_ISA": "base"},
    "opencl-pocl": {"KILN_DEVICE": "opencl", "OCL_ICD_VENDORS": "/etc/OpenCL/vendors/pocl.icd"},
    "opencl-rusticl": {"KILN_DEVICE": "opencl", "OCL_ICD_VENDORS": "/etc/OpenCL/vendors/rusticl.icd",
                       "RUSTICL_ENABLE": "llvmpipe"},
}


# ============================================================ framing / workers

def _write_frame(f, obj):
    b = pickle.dumps(obj, protocol=4)
    f.write(struct.pack("<Q", len(b)))
    f.write(b)
    f.flush()


def _read_exact_fd(fd, n, deadline):
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                raise TimeoutError
        c = os.read(fd, min(n - got, 1 << 20))
        if not c:
            raise EOFError
        chunks.append(c)
        got += len(c)
    return b"".join(chunks)


def _read_frame_fd(fd, deadline=None):
    (n,) = struct.unpack("<Q", _read_exact_fd(fd, 8, deadline))
    return pickle.loads(_read_exact_fd(fd, n, deadline))


def worker_main(kind, lib_path):
    """A worker: reads (model_bytes, feeds, out_specs) frames, answers result frames.
    kind: 'ort' or 'kiln'. Protocol on a private dup of stdout; fd 1 goes to stderr
    so whatever the plugin prints cannot corrupt it."""
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    fd_in = sys.stdin.fileno()
    if kind == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 4
        _write_frame(proto_out, ("ready", ort.__version__))
        while True:
            try:
                req = _read_frame_fd(fd_in)
            except EOFError:
                return
            model, feeds, names = req
            try:
                sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
                outs = sess.run(names, feeds)
                res = ("ok", [_c(o) for o in outs])
            except Exception as e:  # noqa: BLE001
                res = ("err", type(e).__name__, str(e)[:2000])
            _write_frame(proto_out, res)
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import kiln_abi as K
    try:
        lib = K.KilnLibrary(lib_path)
        be = lib.init_backend(0)
        name = lib.backends()[0].name
    except Exception as e:  # noqa: BLE001
        _write_frame(proto_out, ("fail", str(e)))
        return
    _write_frame(proto_out, ("ready", name))
    while True:
        try:
            req = _read_frame_fd(fd_in)
        except EOFError:
            break
        model, runs = req
        g = None
        stage = "onnxInitGraph"
        try:
            g = be.init_graph(model)
            results = []
            for r, (feeds, specs) in enumerate(runs):
                outs = {}
                for n, shape, dt in specs:
                    a = np.empty(shape, dtype=dt)
                    a.reshape(-1).view(np.uint8)[:] = 0x7F if r == 0 else 0xA5  # poison: catches unwritten elements
                    outs[n] = a
                stage = "run"
                g.bind(feeds, outs)
                g.run()
                results.append([outs[n] for n, _, _ in specs])
            res = ("ok", results)
        except K.KilnError as e:
            res = ("err", e.call, K.STATUS.get(e.status, hex(e.status)), e.message)
        except Exception as e:  # noqa: BLE001
            res = ("err", stage, type(e).__name__, str(e))
        finally:
            if g is not None:
                try:
                    g.release()
                except Exception:  # noqa: BLE001
                    pass
        _write_frame(proto_out, res)
    be.release()
    lib.close()


class Worker:
    def __init__(self, name, kind, env_extra, lib_path, errdir, timeout):
        self.name, self.kind, self.env_extra, self.lib_path = name, kind, env_extra, lib_path
        self.errpath = os.path.join(errdir, f"worker_{name}.stderr")
        self.timeout = timeout
        self.p = None
        self.ident = None
        self.starts = 0

    def start(self):
        env = dict(os.environ)
        for k in ("KILN_DEVICE", "KILN_CPU_ISA", "OCL_ICD_VENDORS", "RUSTICL_ENABLE"):
            env.pop(k, None)
        env.update(self.env_extra)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.errf = open(self.errpath, "ab")
        self.errf.write(f"\n==== start {time.ctime()}\n".encode())
        self.errf.flush()
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", self.kind, self.lib_path],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errf, env=env)
        self.starts += 1
        msg = _read_frame_fd(self.p.stdout.fileno(), time.monotonic() + 120)
        if msg[0] != "ready":
            raise RuntimeError(f"worker {self.name} failed to start: {msg}")
        self.ident = msg[1]

    def stop(self):
        if self.p is not None:
            try:
                self.p.stdin.close()
            except Exception:  # noqa: BLE001
                pass
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
            self.p = None
            self.errf.close()

    def stderr_tail(self, n=1500):
        try:
            with open(self.errpath, "rb") as f:
                f.seek(0, 2)
                sz = f.tell()
                f.seek(max(0, sz - n))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def call(self, req):
        """-> result tuple, or ('crash', description) / ('timeout', ...)."""
        if self.p is None:
            self.start()
        try:
            _write_frame(self.p.stdin, req)
            return _read_frame_fd(self.p.stdout.fileno(), time.monotonic() + self.timeout)
        except TimeoutError:
            self.p.kill()  # our own child, by handle
            self.p.wait()
            self.p = None
            self.errf.close()
            return ("timeout", f"no answer within {self.timeout}s")
        except (EOFError, BrokenPipeError):
            rc = self.p.wait()
            self.p = None
            self.errf.close()
            sig = -rc if rc < 0 else None
            desc = f"worker died: rc={rc}" + (f" ({signal.Signals(sig).name})" if sig else "")
            return ("crash", desc + "\n" + self.stderr_tail())


# ============================================================ dtypes

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ABI_DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
              np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]
TSTR = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
        "tensor(int8)": np.int8, "tensor(int16)": np.int16, "tensor(int32)": np.int32,
        "tensor(int64)": np.int64, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
        "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_}
FLOATS = (np.float32, np.float64, np.float16)
SINTS = (np.int8, np.int16, np.int32, np.int64)
UINTS = (np.uint8, np.uint16, np.uint32, np.uint64)
INTS = SINTS + UINTS


def tp(dt):
    return helper.np_dtype_to_tensor_dtype(np.dtype(dt))


def isfloat(dt):
    return np.dtype(dt).kind == "f"


def schema(op, opset):
    return onnx.defs.get_schema(op, opset, "")


def op_exists(op, opset):
    try:
        s = schema(op, opset)
    except Exception:  # noqa: BLE001
        return False
    return not s.deprecated


def schema_types(op, opset, param):
    s = schema(op, opset)
    for c in s.type_constraints:
        if c.type_param_str == param:
            return [TSTR[t] for t in c.allowed_type_strs if t in TSTR]
    raise KeyError(param)


# ============================================================ the case builder

SPECIALS32 = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -3e-42, 0.5, -0.5, 1.5, 2.5, -2.5, 1e30, -1e30, 65504.0]
SPECIALS16 = [np.nan, np.inf, -np.inf, 0.0, -0.0, 6e-8, -3e-6, 0.5, -0.5, 1.5, 2.5, -2.5, 60000.0, -65504.0]


class Reject(Exception):
    """The generator drew something it cannot make valid; draw again."""


class G:
    """One case: a graph under construction, its feeds, and what to compare."""

    def __init__(self, rng, opset, op):
        self.rng, self.opset, self.op = rng, opset, op
        self.inputs, self.inits, self.nodes, self.outputs = [], [], [], []
        self.feeds = {}
        self.n = 0
        self.tol = None            # tolerance class; None: by the op
        self.special = rng.random() < 0.3
        self.sym = rng.random() < 0.08
        self.desc = {}
        self.unordered = None      # TopK sorted=0: (values_out, indices_out, axis)
        self.mask_fn = None        # feeds -> {output: bool array of elements the spec leaves undefined}
        self.np_oracle = None      # feeds -> outputs, where onnxruntime and the evaluator are both unreliable
        self.alt_model = None      # model -> an equivalent model onnxruntime runs (RNN layout=1)
        self.chain = []
        self.out_dims_known = rng.random() < 0.5
        self.force_out = None
        self.alt_params = {}       # input name -> rng -> another valid value (the second feed set)
        self.big = rng.random() < 0.1   # sizes where kiln's tiled / threaded / vector kernels take over

    # ---- random helpers
    def coin(self, p=0.5):
        return bool(self.rng.random() < p)

    def ri(self, a, b):
        return int(self.rng.integers(a, b + 1))

    def choice(self, xs):
        return xs[int(self.rng.integers(0, len(xs)))]

    def since(self, op=None):
        return schema(op or self.op, self.opset).since_version

    def types(self, param, op=None, prefer=np.float32, p_prefer=0.5, only=None):
        ts = [t for t in schema_types(op or self.op, self.opset, param) if t in ABI_DTYPES]
        if only is not None:
            ts = [t for t in ts if t in only]
        if not ts:
            raise Reject(f"no ABI type for {param}")
        if prefer in ts and self.coin(p_prefer):
            return prefer
        return self.choice(ts)

    def dim(self):
        r = self.rng.random()
        if self.big:
            return self.ri(8, 40) if r < 0.5 else (self.ri(1, 8) if r < 0.8 else self.ri(41, 100))
        if r < 0.7:
            return self.ri(1, 4)
        if r < 0.9:
            return self.ri(5, 9)
        return self.ri(10, 17)

    def shape(self, rmin=0, rmax=4, cap=3000):
        if self.big:
            cap *= 20
        rank = self.ri(rmin, rmax)
        s = [self.dim() for _ in range(rank)]
        while int(np.prod(s)) > cap:
            i = int(np.argmax(s))
            s[i] = max(1, s[i] // 2)
        return s

    def bshapes(self, out, n):
        """n shapes that broadcast (numpy) to at most out."""
        res = []
        for _ in range(n):
            k = self.ri(0, len(out)) if self.coin(0.4) else 0
            s = list(out[k:])
            for i in range(len(s)):
                if self.coin(0.3):
                    s[i] = 1
            res.append(s)
        return res

    def axis(self, rank, neg_ok=True):
        a = self.ri(0, rank - 1)
        if neg_ok and self.coin(0.4):
            a -= rank
        return a

    # ---- data
    def data(self, shape, dt, lo=None, hi=None, special=None, scale=None):
        dt = np.dtype(dt)
        shape = tuple(int(d) for d in shape)
        rng = self.rng
        if dt == np.bool_:
            return np.asarray(rng.random(shape) < 0.5)
        if dt.kind == "f":
            if lo is not None:
                a = rng.uniform(lo, hi, shape)
            else:
                sc = scale if scale is not None else self.choice([1.0, 1.0, 3.0, 0.1, 40.0])
                a = rng.standard_normal(shape) * sc
                if self.coin(0.15):  # repeated values, exact ties
                    a = np.round(a * 2) / 2
            a = np.asarray(a).astype(dt)
            if (self.special if special is None else special) and a.size:
                sp = SPECIALS16 if dt == np.float16 else SPECIALS32
                m = rng.random(shape) < 0.15
                vals = np.array([self.choice(sp) for _ in range(int(m.sum()))], dtype=np.float64)
                with np.errstate(over="ignore"):
                    a[m] = vals.astype(dt)
            return _c(a)
        info = np.iinfo(dt)
        if lo is None:
            if self.coin(0.06) and (special is None or special):
                lo, hi = info.min, info.max
            elif dt.kind == "u":
                lo, hi = 0, 20
            else:
                lo, hi = -10, 10
        lo, hi = max(lo, info.min), min(hi, info.max)
        a = rng.integers(lo, hi, size=shape, dtype=dt, endpoint=True)
        return _c(a)

    # ---- graph
    def fresh(self, p):
        self.n += 1
        return f"{p}{self.n}"

    def input(self, arr, name=None, sym=None):
        """A graph input (fed through the ABI)."""
        arr = _c(arr)
        if arr.dtype not in [np.dtype(d) for d in ABI_DTYPES]:
            raise Reject(f"dtype {arr.dtype} cannot cross the ABI")
        if 0 in arr.shape:
            raise Reject("zero-sized input")
        name = name or self.fresh("x")
        dims = list(arr.shape)
        if (self.sym if sym is None else sym) and dims:
            dims = [f"{name}_d{i}" if self.coin(0.5) else d for i, d in enumerate(dims)]
        self.inputs.append(helper.make_tensor_value_info(name, tp(arr.dtype), dims))
        self.feeds[name] = arr
        return name

    def const(self, arr, p_input=0.0, name=None):
        """An initializer (or, with probability p_input, a graph input)."""
        arr = np.asarray(arr)
        if p_input and self.coin(p_input) and arr.size and arr.dtype in [np.dtype(d) for d in ABI_DTYPES]:
            return self.input(arr, name=name, sym=False)
        name = name or self.fresh("c")
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def axes(self, axes, ins, attrs, as_input):
        """The node's axes as its opset takes them: an int64 constant input
        (a graph input with probability 0.2) or the axes attribute; kept in desc."""
        if as_input:
            ins.append(self.const(np.array(axes, np.int64), p_input=0.2))
        else:
            attrs["axes"] = axes
        self.desc["axes"] = axes

    def node(self, op, ins, nout=1, outs=None, **attrs):
        outs = outs or [self.fresh("y") for _ in range(nout)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op, list(ins), list(outs), **attrs))
        for k, v in attrs.items():
            self.desc[f"{op}.{k}" if len(self.nodes) > 1 else k] = v if not isinstance(v, onnx.TensorProto) else "tensor"
        return outs if nout != 1 or (outs and len(outs) != 1) else outs[0]

    def out(self, *names):
        for n in names:
            if n and n not in self.outputs:
                self.outputs.append(n)

    def model(self, shapes=False):
        outs = [helper.make_empty_tensor_value_info(n) for n in self.outputs]
        graph = helper.make_graph(self.nodes, "g", self.inputs, outs, initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="diff_ort")
        m.ir_version = 8
        if self.force_out:  # onnx cannot infer through this node (MVN's function body at float64/float16)
            del m.graph.output[:]
            for n in self.outputs:
                et, shp = self.force_out[n]
                m.graph.output.append(helper.make_tensor_value_info(n, et, shp))
            onnx.checker.check_model(m)
            return m
        inf = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
        known = {vi.name: vi for vi in list(inf.graph.output) + list(inf.graph.value_info)}
        del m.graph.output[:]
        for n in self.outputs:
            vi = known.get(n)
            if vi is None or not vi.type.tensor_type.elem_type:
                raise Reject(f"no type inferred for output {n}")
            et = vi.type.tensor_type.elem_type
            tt = vi.type.tensor_type
            if tt.HasField("shape") and (shapes or self.out_dims_known):
                m.graph.output.append(vi)
            elif tt.HasField("shape"):  # the rank only: dims named, not given
                m.graph.output.append(helper.make_tensor_value_info(n, et, [f"{n}_o{i}" for i in
                                                                             range(len(tt.shape.dim))]))
            else:
                raise Reject(f"no shape inferred for output {n}")
        onnx.checker.check_model(m, full_check=True)
        return m

    def inferred(self, name):
        """(dtype, shape or None) of a value, by onnx shape inference."""
        m = helper.make_model(helper.make_graph(self.nodes, "g", self.inputs,
                                                [helper.make_empty_tensor_value_info(name)], initializer=self.inits),
                              opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        inf = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
        for vi in list(inf.graph.output) + list(inf.graph.value_info):
            if vi.name == name:
                tt = vi.type.tensor_type
                dt = helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt.elem_type else None
                if not tt.HasField("shape"):
                    return dt, None
                dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
                return dt, (None if None in dims else dims)
        return None, None


# ============================================================ generators

GENS = {}      # op -> (fn, tolerance class)


def gen(*ops, tol="exact"):
    def deco(fn):
        for o in ops:
            GENS[o] = (fn, tol)
        return fn
    return deco


# ---- elementwise unary

UNARY_DOMAIN = {"Sqrt": (-0.5, 9), "Log": (-0.5, 20), "Asin": (-1.1, 1.1), "Acos": (-1.1, 1.1),
                "Atanh": (-1.1, 1.1), "Acosh": (0.8, 8), "Exp": (-30, 30), "Tan": (-1.4, 1.4),
                "Sinh": (-20, 20), "Cosh": (-20, 20), "Reciprocal": (-4, 4), "Round": (-6, 6)}


@gen("Abs", "Neg", "Floor", "Ceil", "Relu", "Sign", "Round", "Not", "IsNaN", "Identity", tol="exact")
@gen("Sqrt", "Exp", "Log", "Reciprocal", "Sigmoid", "Tanh", "Softplus", "Softsign", "Erf", "HardSwish",
     "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
     "LeakyRelu", "Elu", "Selu", "HardSigmoid", "ThresholdedRelu", "Celu", "Shrink", "IsInf", tol="ew")
def g_unary(g):
    op = g.op
    param = {"Not": "T", "IsNaN": "T1", "IsInf": "T1"}.get(op, "T")
    if op == "Identity" and g.since() >= 14:
        param = "V"
    dt = g.types(param)
    shape = g.shape(0, 4)
    if isfloat(dt) and op in UNARY_DOMAIN and g.coin(0.7):
        lo, hi = UNARY_DOMAIN[op]
        x = g.data(shape, dt, lo, hi)
        if op == "Round" and g.coin(0.5):
            x = (np.round(x.astype(np.float64) * 2) / 2).astype(dt)  # halves: ties to even
    else:
        x = g.data(shape, dt)
    a = {}
    if op == "LeakyRelu" and g.coin(0.7):
        a["alpha"] = g.choice([0.01, 0.2, 0.5, -0.3, 0.0, 1.5])
    if op in ("Elu", "Celu") and g.coin(0.7):
        a["alpha"] = g.choice([1.0, 0.5, 2.0, 0.1])
    if op == "Selu":
        if g.coin(0.5):
            a["alpha"] = g.choice([1.2, 1.67326, 0.5])
        if g.coin(0.5):
            a["gamma"] = g.choice([1.0507, 2.0, 0.7])
    if op == "HardSigmoid":
        if g.coin(0.6):
            a["alpha"] = g.choice([0.2, 0.5, 1.0 / 6, 1.5])
        if g.coin(0.6):
            a["beta"] = g.choice([0.5, 0.0, 0.3, 0.8])
    if op == "ThresholdedRelu" and g.coin(0.7):
        a["alpha"] = g.choice([1.0, 0.0, 0.5, -1.0, 2.5])
    if op == "Shrink":
        if g.coin(0.7):
            a["lambd"] = g.choice([0.5, 0.0, 1.0, 2.0, 3.0])
        if g.coin(0.7):
            a["bias"] = g.choice([0.0, 0.5, 1.0, 2.0, 1.5])
    if op == "IsInf":
        if g.coin(0.5):
            a["detect_negative"] = g.ri(0, 1)
        if g.coin(0.5):
            a["detect_positive"] = g.ri(0, 1)
    y = g.node(op, [g.input(x)], **a)
    g.out(y)


# ---- elementwise binary

def _two_bshapes(g):
    out = g.shape(0, 4)
    if g.coin(0.35):
        return out, list(out), list(out)
    s = g.bshapes(out, 2)
    if g.coin(0.5):
        s[g.ri(0, 1)] = list(out)
    return out, s[0], s[1]


@gen("Add", "Sub", "Mul", tol="ew")
@gen("Div", tol="ew")
def g_arith(g):
    op = g.op
    dt = g.types("T")
    _, sa, sb = _two_bshapes(g)
    if g.opset < 7:
        sa = sb
    a = g.data(sa, dt)
    if isfloat(dt):
        b = g.data(sb, dt)
    else:
        info = np.iinfo(dt)
        b = g.data(sb, dt)
        if op == "Div":
            b[b == 0] = 1 if info.min == 0 else g.choice([1, -1, 3, -7])
            if info.min < 0:  # INT_MIN / -1 overflows: keep it out
                a[a == info.min] = info.min + 1
    g.out(g.node(op, [g.input(a), g.input(b)]))


@gen("Mod", tol="ew")
def g_mod(g):
    dt = g.types("T")
    _, sa, sb = _two_bshapes(g)
    a = g.data(sa, dt)
    b = g.data(sb, dt)
    if isfloat(dt):
        fmod = 1
    else:
        fmod = g.ri(0, 1)
        b[b == 0] = 3
        info = np.iinfo(dt)
        if info.min < 0:
            a[a == info.min] = info.min + 1
    g.out(g.node("Mod", [g.input(a), g.input(b)], fmod=fmod if (fmod or g.coin(0.5)) else None))


@gen("Pow", tol="ew")
def g_pow(g):
    if g.since() >= 12:
        dt = g.types("T")
        dt1 = g.types("T1") if g.coin(0.5) else dt
        if dt1 not in schema_types("Pow", g.opset, "T1"):
            dt1 = np.float32
    else:
        dt = dt1 = g.types("T")
    _, sa, sb = _two_bshapes(g)
    if isfloat(dt):
        a = g.data(sa, dt, -4, 4) if g.coin(0.6) else g.data(sa, dt)
    else:
        a = g.data(sa, dt, -6, 6)
    if isfloat(dt1):
        if g.coin(0.5):
            b = g.data(sb, dt1, -3, 3)
        else:
            b = np.asarray(g.rng.integers(-3, 4, sb)).astype(dt1)
            if not isfloat(dt):
                b = np.abs(b)
        if not isfloat(dt):
            b = np.abs(b).astype(dt1)  # int base: a negative or fractional power truncates
            a = np.abs(a)
            b = np.floor(b).astype(dt1) if g.coin(0.5) else b
    else:
        b = g.data(sb, dt1, 0, 4)
    an, bn = g.input(a), g.input(b)
    y = g.node("Pow", [an, bn])
    g.out(y)
    if not isfloat(dt):
        def mask(feeds, an=an, bn=bn, y=y, dt=dt):
            with np.errstate(all="ignore"):
                r = np.power(feeds[an].astype(np.float64), feeds[bn].astype(np.float64))
            info = np.iinfo(dt)
            return {y: np.broadcast_to(~np.isfinite(r) | (r > info.max) | (r < info.min),
                                       np.broadcast_shapes(feeds[an].shape, feeds[bn].shape)).copy()}
        g.mask_fn = mask


@gen("BitShift", tol="exact")
def g_bitshift(g):
    dt = g.types("T")
    _, sa, sb = _two_bshapes(g)
    bits = np.dtype(dt).itemsize * 8
    a = g.data(sa, dt, 0, np.iinfo(dt).max) if g.coin(0.5) else g.data(sa, dt)
    b = g.data(sb, dt, 0, bits - 1)
    g.out(g.node("BitShift", [g.input(a), g.input(b)], direction=g.choice(["LEFT", "RIGHT"])))


@gen("Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", tol="exact")
def g_cmp(g):
    dt = g.types("T")
    _, sa, sb = _two_bshapes(g)
    if isfloat(dt) and g.coin(0.5):
        a, b = g.data(sa, dt, -2, 2), g.data(sb, dt, -2, 2)
        a, b = np.round(a).astype(dt), np.round(b).astype(dt)
        if g.special:
            a.flat[0] = np.nan
    elif dt == np.bool_:
        a, b = g.data(sa, dt), g.data(sb, dt)
    else:
        a, b = g.data(sa, dt, 0, 3), g.data(sb, dt, 0, 3)
    g.out(g.node(g.op, [g.input(a), g.input(b)]))


@gen("And", "Or", "Xor", tol="exact")
def g_logic(g):
    _, sa, sb = _two_bshapes(g)
    g.out(g.node(g.op, [g.input(g.data(sa, np.bool_)), g.input(g.data(sb, np.bool_))]))


@gen("Where", tol="exact")
def g_where(g):
    dt = g.types("T")
    out = g.shape(0, 4)
    sc, sx, sy = g.bshapes(out, 3)
    g.out(g.node("Where", [g.input(g.data(sc, np.bool_)), g.input(g.data(sx, dt)), g.input(g.data(sy, dt))]))


@gen("Min", "Max", tol="exact")
@gen("Sum", "Mean", tol="ew")
def g_variadic(g):
    dt = g.types("T")
    n = g.choice([1, 2, 2, 3, 4])
    out = g.shape(0, 4)
    shapes = g.bshapes(out, n) if g.since() >= 8 else [list(out)] * n
    ins = [g.input(g.data(s, dt)) for s in shapes]
    g.out(g.node(g.op, ins))


@gen("PRelu", tol="ew")
def g_prelu(g):
    dt = g.types("T")
    xs = g.shape(1, 4)
    r = g.rng.random()
    if r < 0.3 and len(xs) >= 2:
        ss = [xs[1]] + [1] * (len(xs) - 2)        # [C,1,1]
    elif r < 0.5:
        ss = [1]
    elif r < 0.7:
        ss = list(xs[-1:])                        # numpy trailing
    else:
        k = g.ri(0, len(xs))
        ss = [d if g.coin(0.6) else 1 for d in xs[k:]] or [1]
    if g.since() < 9:  # PRelu-7: unidirectional broadcast, float only
        pass
    x = g.data(xs, dt)
    s = g.data(ss, dt, -1, 1) if isfloat(dt) else g.data(ss, dt, -3, 3)
    g.out(g.node("PRelu", [g.input(x), g.const(s, p_input=0.5)]))


@gen("Clip", tol="exact")
def g_clip(g):
    dt = g.types("T")
    x = g.data(g.shape(0, 4), dt)
    if g.since() < 11:
        a = {}
        if g.coin(0.7):
            a["min"] = float(g.choice([-1.0, 0.0, -0.5, 2.0]))
        if g.coin(0.7):
            a["max"] = float(g.choice([1.0, 6.0, 0.5, -1.0]))
        g.out(g.node("Clip", [g.input(x)], **a))
        return
    ins = [g.input(x)]
    lo = hi = None
    if isfloat(dt):
        lo = np.array(g.choice([-1.0, 0.0, -0.5, 2.0, -np.inf]), dtype=dt)
        hi = np.array(g.choice([1.0, 6.0, 0.5, -1.0, np.inf]), dtype=dt)
    else:
        lo = np.array(g.ri(-5, 3) if np.dtype(dt).kind == "i" else g.ri(0, 5), dtype=dt)
        hi = np.array(g.ri(-2, 8) if np.dtype(dt).kind == "i" else g.ri(2, 15), dtype=dt)
    form = g.choice(["both", "min", "max", "none", "both"])
    ins.append(g.const(lo, p_input=0.3) if form in ("both", "min") else "")
    if form in ("both", "max"):
        ins.append(g.const(hi, p_input=0.3))
    while ins and ins[-1] == "":
        ins.pop()
    g.desc["form"] = form
    g.out(g.node("Clip", ins))


def _oor_mask(x, to):
    """Float -> integer casts are undefined out of range (Cast's spec)."""
    if not isfloat(x.dtype) or np.dtype(to).kind not in "iu":
        return None
    info = np.iinfo(to)
    with np.errstate(invalid="ignore"):
        t = np.trunc(x.astype(np.float64))
        return ~np.isfinite(t) | (t < info.min) | (t > info.max)


def _cast_src(g, dt, to):
    shape = g.shape(0, 3)
    if isfloat(dt):
        if to in INTS and not g.coin(0.15):
            info = np.iinfo(to)
            lo, hi = max(float(info.min), -300.0), min(float(info.max), 300.0)
            x = g.data(shape, dt, lo, hi, special=False)
            if g.coin(0.4):
                x = (np.round(x.astype(np.float64) * 2) / 2).astype(dt)
            return x
        return g.data(shape, dt, scale=g.choice([1.0, 100.0, 1e5, 1e20]))
    return g.data(shape, dt)


@gen("Cast", tol="exact")
def g_cast(g):
    dt = g.types("T1")
    to = g.types("T2")
    x = _cast_src(g, dt, to)
    if g.coin(0.15) and g.since() >= 13 and isfloat(dt):  # through bfloat16 and back
        y = g.node("Cast", [g.input(x)], to=TensorProto.BFLOAT16)
        g.out(g.node("Cast", [y], to=tp(dt)))
        g.tol = "bf16"
        return
    xn = g.input(x)
    y = g.node("Cast", [xn], to=tp(to))
    g.mask_fn = lambda feeds: {y: _oor_mask(feeds[xn], to)}
    g.out(y)


@gen("CastLike", tol="exact")
def g_castlike(g):
    dt = g.types("T1")
    to = g.types("T2")
    x = _cast_src(g, dt, to)
    like = g.data([g.ri(1, 3)], to)
    xn = g.input(x)
    y = g.node("CastLike", [xn, g.const(like, p_input=0.5)])
    g.mask_fn = lambda feeds: {y: _oor_mask(feeds[xn], to)}
    g.out(y)


@gen("Dropout", tol="exact")
def g_dropout(g):
    dt = g.types("T")
    x = g.data(g.shape(0, 4), dt)
    ins = [g.input(x)]
    a = {}
    if g.since() >= 12:
        if g.coin(0.5):
            ins.append(g.const(np.array(g.choice([0.5, 0.0, 0.3]), dtype=np.float32)))
            if g.coin(0.5):
                ins.append(g.const(np.array(False)))
        if g.coin(0.3):
            a["seed"] = 3
    elif g.coin(0.5):
        a["ratio"] = 0.3
    nout = 2 if g.coin(0.4) else 1
    outs = g.node("Dropout", ins, nout=nout, **a)
    if nout == 2:
        g.out(*outs)
    else:
        g.out(outs)


# ---- reductions

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


@gen(*REDUCE_OPS, tol="acc")
def g_reduce(g):
    op = g.op
    dt = g.types("T")
    shape = g.shape(1, 4)
    r = len(shape)
    if not isfloat(dt):
        x = g.data(shape, dt, special=False)
    elif op == "ReduceProd":
        x = g.data(shape, dt, 0.5, 1.5) if isfloat(dt) and g.coin(0.7) else g.data(shape, dt, -2, 2)
    elif op in ("ReduceLogSum",) and isfloat(dt) and g.coin(0.7):
        x = g.data(shape, dt, 0.0, 3.0)
    elif op == "ReduceLogSumExp" and isfloat(dt) and g.coin(0.5):
        x = g.data(shape, dt, -5, 5)
    else:
        x = g.data(shape, dt)
    a = {}
    if g.coin(0.5):
        a["keepdims"] = g.ri(0, 1)
    axes = None
    if g.coin(0.8):
        k = g.ri(1, r)
        axes = sorted(int(v) for v in g.rng.choice(r, k, replace=False))
        axes = [ax - r if g.coin(0.35) else ax for ax in axes]
        if g.coin(0.2):
            axes = axes[::-1]
    ins = [g.input(x)]
    if g.since() >= 13 and op == "ReduceSum" or g.since() >= 18:
        if g.coin(0.3):
            a["noop_with_empty_axes"] = g.ri(0, 1)
        if axes is not None:
            g.axes(axes, ins, a, True)
        elif g.coin(0.3):
            ins.append(g.const(np.zeros([0], np.int64)))
            g.desc["axes"] = "[] (empty)"
    elif axes is not None:
        g.axes(axes, ins, a, False)
    g.out(g.node(op, ins, **a))


@gen("ArgMax", "ArgMin", tol="exact")
def g_arg(g):
    dt = g.types("T")
    shape = g.shape(1, 4)
    x = g.data(shape, dt, -3, 3) if g.coin(0.5) else g.data(shape, dt, special=g.special and g.coin(0.3))
    if isfloat(dt) and g.coin(0.5):
        x = np.round(x).astype(dt)  # ties
    a = {}
    if g.coin(0.8):
        a["axis"] = g.axis(len(shape), neg_ok=g.since() >= 11)
    if g.coin(0.5):
        a["keepdims"] = g.ri(0, 1)
    if g.since() >= 12 and g.coin(0.6):
        a["select_last_index"] = g.ri(0, 1)
    g.out(g.node(g.op, [g.input(x)], **a))


@gen("TopK", tol="exact")
def g_topk(g):
    dt = g.types("T")
    shape = g.shape(1, 4)
    x = g.data(shape, dt, -3, 3) if g.coin(0.4) else g.data(shape, dt, special=g.special and g.coin(0.3))
    if isfloat(dt) and g.coin(0.4):
        x = np.round(x).astype(dt)
    a = {}
    axis = g.axis(len(shape), neg_ok=g.since() >= 11) if g.coin(0.8) else -1
    if axis != -1 or g.coin(0.5):
        a["axis"] = axis
    n = shape[axis]
    k = g.ri(1, n)
    if g.since() >= 11:
        if g.coin(0.5):
            a["largest"] = g.ri(0, 1)
        if g.coin(0.4):
            a["sorted"] = g.ri(0, 1)
    ins = [g.input(x)]
    if g.since() >= 10:
        kn = g.const(np.array([k], np.int64), p_input=0.35)
        ins.append(kn)
        g.alt_params[kn] = lambda rng, n=n: np.array([int(rng.integers(1, n + 1))], np.int64)
    else:
        a["k"] = k
    g.desc["k"] = k
    v, i = g.node("TopK", ins, nout=2, **a)
    if a.get("sorted", 1) == 0:
        g.unordered = (v, i, axis)
    g.out(v, i)


@gen("CumSum", tol="acc")
def g_cumsum(g):
    dt = g.types("T")
    shape = g.shape(1, 4)
    x = g.data(shape, dt)
    axis = g.axis(len(shape))
    at = g.choice([np.int64, np.int32])
    a = {}
    if g.coin(0.5):
        a["exclusive"] = g.ri(0, 1)
    if g.coin(0.5):
        a["reverse"] = g.ri(0, 1)
    g.desc["axis"] = axis
    ax = np.array(axis, dtype=at)  # "A 0-D tensor" (a [1] tensor is not spec-valid)
    g.out(g.node("CumSum", [g.input(x), g.const(ax, p_input=0.2)], **a))


@gen("Softmax", "LogSoftmax", tol="acc")
@gen("Hardmax", tol="exact")
def g_softmax(g):
    dt = g.types("T")
    shape = g.shape(1, 4)
    x = g.data(shape, dt)
    if g.op == "Hardmax" and g.coin(0.5):
        x = np.round(x).astype(dt)
    a = {}
    if g.coin(0.8) or (len(shape) == 1 and g.since() < 13):
        a["axis"] = g.axis(len(shape), neg_ok=g.since() >= 11)
        if g.since() < 13 and g.coin(0.2):
            a["axis"] = 0
    xn = g.input(x)
    g.out(g.node(g.op, [xn], **a))

    def oracle(feeds, op=g.op, ver=g.since(), axis=a.get("axis", 1 if g.since() < 13 else -1)):
        x = feeds[xn]
        r = max(x.ndim, 1)
        ax = axis + r if axis < 0 else axis
        if ver < 13:  # coerced to 2-D [prod(:axis), prod(axis:)]
            x2 = x.reshape(int(np.prod(x.shape[:ax])), -1)
            red = 1
        else:
            x2, red = x, ax
        if op == "Hardmax":
            am = np.argmax(x2, axis=red)
            y = np.zeros_like(x2)
            np.put_along_axis(y, np.expand_dims(am, red), 1, axis=red)
        else:
            x64 = x2.astype(np.float64)
            mx = np.max(x64, axis=red, keepdims=True)
            e = np.exp(x64 - mx)
            ssum = np.sum(e, axis=red, keepdims=True)
            y = e / ssum if op == "Softmax" else (x64 - mx) - np.log(ssum)
        return [np.asarray(y).reshape(x.shape).astype(x.dtype)]
    g.np_oracle = oracle


# ---- matmul family

@gen("MatMul", tol="acc")
def g_matmul(g):
    dt = g.types("T")
    M, K, N = g.dim(), g.dim(), g.dim()
    batch = g.shape(0, 2, cap=12)
    ba, bb = g.bshapes(batch, 2) if batch else ([], [])
    sa = ba + [M, K] if g.coin(0.85) else [K]
    sb = bb + [K, N] if g.coin(0.85) else [K]
    if isfloat(dt):
        a, b = g.data(sa, dt), g.data(sb, dt)
    else:
        a, b = g.data(sa, dt, -5, 5, special=False), g.data(sb, dt, -5, 5, special=False)
        if np.dtype(dt).kind == "u":
            a, b = g.data(sa, dt, 0, 5, special=False), g.data(sb, dt, 0, 5, special=False)
    g.out(g.node("MatMul", [g.input(a), g.const(b, p_input=0.6)]))


@gen("Gemm", tol="acc")
def g_gemm(g):
    dt = g.types("T")
    M, K, N = g.dim(), g.dim(), g.dim()
    a = {}
    ta, tb = g.ri(0, 1), g.ri(0, 1)
    if ta or g.coin(0.3):
        a["transA"] = ta
    if tb or g.coin(0.3):
        a["transB"] = tb
    if g.coin(0.4):
        a["alpha"] = g.choice([0.5, 2.0, -1.0, 0.0])
    if g.coin(0.4):
        a["beta"] = g.choice([0.5, 2.0, -1.0, 0.0])
    sa = [K, M] if ta else [M, K]
    sb = [N, K] if tb else [K, N]
    ints = not isfloat(dt)
    mk = (lambda s: g.data(s, dt, 0, 4, special=False)) if ints else (lambda s: g.data(s, dt))
    ins = [g.input(mk(sa)), g.const(mk(sb), p_input=0.6)]
    if g.since() < 11 or g.coin(0.8):
        cs = g.choice([[M, N], [N], [1, N], [M, 1], [1], [], [1, 1], [M, N]])
        ins.append(g.const(mk(cs), p_input=0.4))
        g.desc["C"] = cs
    g.out(g.node("Gemm", ins, **a))


@gen("Einsum", tol="acc")
def g_einsum(g):
    dt = g.types("T", only=FLOATS + (np.int32, np.int64))
    d = {c: g.ri(1, 5) for c in "ijklmn"}
    eqs = ["ij,jk->ik", "ij,jk", "bij,bjk->bik", "ij->ji", "ii->i", "ii", "ij->", "ij->i", "ij,ij->ij",
           "i,j->ij", "i,i->", "...ij,...jk->...ik", "bij,jk->bik", "ijk->kji", "ij,kj->ik", "i,i",
           "ijk,ikl->ijl", "abc,cd->abd", "a...,a...->...", "ij,j->i", "ijk->ik", "iij->ij"]
    eq = g.choice(eqs)
    lhs = eq.split("->")[0]
    dims = {"a": g.ri(1, 4), "b": g.ri(1, 4), "c": g.ri(1, 4), "d": g.ri(1, 4), **d}
    ell = g.shape(0, 2, cap=8)
    ins = []
    for term in lhs.split(","):
        s = []
        for ch in term.replace("...", "."):
            s += ell if ch == "." else [dims[ch]]
        x = g.data(s, dt) if isfloat(dt) else g.data(s, dt, -4, 4, special=False)
        ins.append(g.input(x))
    g.out(g.node("Einsum", ins, equation=eq))


@gen("Det", tol="acc")
def g_det(g):
    dt = g.types("T")
    n = g.ri(1, 4)
    s = g.shape(0, 2, cap=8) + [n, n]
    g.out(g.node("Det", [g.input(g.data(s, dt, special=False))]))


# ---- convolution and pooling

def _spatial(g, nd, k_max=4):
    ks = [g.ri(1, k_max) for _ in range(nd)]
    ds = [g.choice([1, 1, 1, 2, 3]) for _ in range(nd)] if g.coin(0.3) else [1] * nd
    ss = [g.choice([1, 1, 2, 3]) for _ in range(nd)] if g.coin(0.5) else [1] * nd
    return ks, ds, ss


def _pads_mode(g, nd, ks, ds, allow_over=True, pool=False):
    """-> (attrs, pads list)"""
    a = {}
    r = g.rng.random()
    pads = [0] * (2 * nd)
    if r < 0.25:
        a["auto_pad"] = g.choice(["SAME_UPPER", "SAME_LOWER", "VALID"])
    elif r < 0.7:
        for i in range(2 * nd):
            ek = (ks[i % nd] - 1) * ds[i % nd] + 1
            lim = ks[i % nd] - 1 if pool else ek
            pads[i] = g.ri(0, max(0, lim))
        a["pads"] = pads
    elif r < 0.8:
        a["auto_pad"] = "NOTSET"
    return a, pads


def _conv_out(in_, k, d, s, pb, pe):
    return (in_ + pb + pe - ((k - 1) * d + 1)) // s + 1


def _conv_attrs(g, a, ks, ds, ss, grp):
    """Conv / ConvTranspose: kernel_shape, dilations, strides and group, each
    written when it differs from its default or by chance when it does not."""
    if g.coin(0.6):
        a["kernel_shape"] = ks
    if any(d != 1 for d in ds) or g.coin(0.2):
        a["dilations"] = ds
    if any(s != 1 for s in ss) or g.coin(0.2):
        a["strides"] = ss
    if grp != 1 or g.coin(0.2):
        a["group"] = grp


def _conv_node(g, op, a, ks, ds, ss, grp, dt, xs, ws, M, p_bias):
    """Conv / ConvTranspose node op: its attributes (_conv_attrs), X of shape
    xs, W of shape ws (each a constant or, 30 %, a graph input) and, with
    probability p_bias, a bias of M."""
    _conv_attrs(g, a, ks, ds, ss, grp)
    x = g.data(xs, dt)
    w = g.data(ws, dt, scale=g.choice([1.0, 0.3]))
    ins = [g.input(x), g.const(w, p_input=0.3)]
    if g.coin(p_bias):
        ins.append(g.const(g.data([M], dt), p_input=0.3))
    g.desc["x"] = xs
    g.out(g.node(op, ins, **a))


@gen("Conv", tol="acc")
def g_conv(g):
    dt = g.types("T")
    nd = g.choice([1, 2, 2, 2, 3])
    grp = g.choice([1, 1, 1, 2, 3])
    cg, mg = g.ri(1, 3), g.ri(1, 3)
    if g.big:
        cg, mg = g.ri(1, 24), g.ri(1, 24)
    if g.coin(0.15):  # depthwise
        cg, grp, mg = 1, g.ri(2, 6 if not g.big else 32), g.choice([1, 2])
    C, M, N = grp * cg, grp * mg, g.ri(1, 2)
    ks, ds, ss = _spatial(g, nd, 4 if nd < 3 else 3)
    a, pads = _pads_mode(g, nd, ks, ds)
    sp = []
    for i in range(nd):
        ek = (ks[i] - 1) * ds[i] + 1
        lo = max(1, ek - pads[i] - pads[i + nd]) if a.get("auto_pad") not in ("SAME_UPPER", "SAME_LOWER") else 1
        if a.get("auto_pad") == "VALID":
            lo = ek
        sp.append(g.ri(lo, lo + (9 if nd < 3 else 4) + (20 if g.big and nd < 3 else 0)))
    _conv_node(g, "Conv", a, ks, ds, ss, grp, dt, [N, C] + sp, [M, cg] + ks, M, 0.6)


@gen("ConvTranspose", tol="acc")
def g_convtranspose(g):
    dt = g.types("T")
    nd = g.choice([1, 2, 2, 3])
    grp = g.choice([1, 1, 2, 3])
    cg, mg = g.ri(1, 3), g.ri(1, 3)
    C, M, N = grp * cg, grp * mg, g.ri(1, 2)
    ks, ds, ss = _spatial(g, nd, 4 if nd < 3 else 3)
    sp = [g.ri(1, 7 if nd < 3 else 4) for _ in range(nd)]
    a = {}
    form = g.choice(["pads", "pads", "none", "output_shape", "auto", "output_padding"])
    full = [ss[i] * (sp[i] - 1) + (ks[i] - 1) * ds[i] + 1 for i in range(nd)]
    if form in ("pads", "output_padding"):
        pads = [0] * (2 * nd)
        for i in range(2 * nd):
            pads[i] = g.ri(0, max(0, min(ks[i % nd] - 1, 3)))
        for i in range(nd):
            while full[i] - pads[i] - pads[i + nd] < 1:
                pads[i] = max(0, pads[i] - 1)
                pads[i + nd] = max(0, pads[i + nd] - 1)
        a["pads"] = pads
    if form == "output_padding" or (form == "output_shape" and g.coin(0.3)):
        op_ = [g.ri(0, max(ss[i], ds[i]) - 1) for i in range(nd)]
        a["output_padding"] = op_
    if form == "output_shape":
        outp = a.get("output_padding", [0] * nd)
        osh = [max(1, full[i] + outp[i] - g.ri(0, max(0, (ks[i] - 1) * ds[i]))) for i in range(nd)]
        a["output_shape"] = osh
        if g.coin(0.4):
            a["auto_pad"] = g.choice(["SAME_UPPER", "SAME_LOWER", "NOTSET"])
    if form == "auto":
        a["auto_pad"] = g.choice(["SAME_UPPER", "SAME_LOWER", "VALID"])
    _conv_node(g, "ConvTranspose", a, ks, ds, ss, grp, dt, [N, C] + sp, [C, mg] + ks, M, 0.5)


@gen("MaxPool", tol="exact")
@gen("AveragePool", "LpPool", tol="acc")
def g_pool(g):
    op = g.op
    dt = g.types("T")
    nd = g.choice([1, 2, 2, 2, 3])
    N, C = g.ri(1, 2), g.ri(1, 4) if not g.big else g.ri(5, 40)
    ks = [g.ri(1, 4) for _ in range(nd)]
    ds = [1] * nd
    if op == "MaxPool" and g.since() >= 10 and g.coin(0.3):
        ds = [g.choice([1, 2, 3]) for _ in range(nd)]
    ss = [g.choice([1, 1, 2, 3]) for _ in range(nd)] if g.coin(0.6) else [1] * nd
    a, pads = _pads_mode(g, nd, ks, ds, pool=True)
    sp = []
    for i in range(nd):
        ek = (ks[i] - 1) * ds[i] + 1
        lo = max(1, ek - pads[i] - pads[i + nd])
        if a.get("auto_pad") == "VALID":
            lo = ek
        sp.append(g.ri(lo, lo + (9 if nd < 3 else 4) + (25 if g.big and nd < 3 else 0)))
    a["kernel_shape"] = ks
    if any(s != 1 for s in ss) or g.coin(0.2):
        a["strides"] = ss
    if any(d != 1 for d in ds):
        a["dilations"] = ds
    ver = g.since()
    if op in ("MaxPool", "AveragePool") and ver >= 10 and g.coin(0.4):
        a["ceil_mode"] = g.ri(0, 1)
    if op == "AveragePool" and g.coin(0.5):
        a["count_include_pad"] = g.ri(0, 1)
    if op == "LpPool" and g.coin(0.7):
        a["p"] = g.choice([1, 2, 3])
    nout = 1
    if op == "MaxPool" and ver >= 8 and g.coin(0.5):
        nout = 2
        if g.coin(0.5):
            a["storage_order"] = g.ri(0, 1)
    x = g.data([N, C] + sp, dt)
    if op == "LpPool" and g.coin(0.5):
        x = np.abs(x)
    g.desc["x"] = [N, C] + sp
    outs = g.node(op, [g.input(x)], nout=nout, **a)
    g.out(*(outs if nout == 2 else [outs]))


@gen("GlobalMaxPool", tol="exact")
@gen("GlobalAveragePool", "GlobalLpPool", tol="acc")
def g_gpool(g):
    dt = g.types("T")
    s = [g.ri(1, 2), g.ri(1, 4)] + g.shape(1, 3, cap=300)
    a = {}
    if g.op == "GlobalLpPool" and g.coin(0.7):
        a["p"] = g.choice([1, 2, 3])
    xn = g.input(g.data(s, dt))
    g.out(g.node(g.op, [xn], **a))

    def oracle(feeds, op=g.op, p=a.get("p", 2)):
        x = feeds[xn].astype(np.float64)
        ax = tuple(range(2, x.ndim))
        if op == "GlobalMaxPool":
            y = np.max(x, axis=ax, keepdims=True)
        elif op == "GlobalAveragePool":
            y = np.mean(x, axis=ax, keepdims=True)
        else:
            y = np.sum(np.abs(x) ** p, axis=ax, keepdims=True) ** (1.0 / p)
        return [y.astype(feeds[xn].dtype)]
    g.np_oracle = oracle


@gen("MaxUnpool", tol="exact")
def g_maxunpool(g):
    dt = np.float32  # onnxruntime runs float only; the evaluator's MaxUnpool is not reliable
    nd = g.choice([1, 2, 2])
    ks = [g.ri(1, 3) for _ in range(nd)]
    ss = [g.ri(1, 3) for _ in range(nd)]
    sp = [g.ri(k, k + 6) for k in ks]
    x = g.data([g.ri(1, 2), g.ri(1, 3)] + sp, dt, special=False)
    x = x + (np.arange(x.size).reshape(x.shape) * 1e-3).astype(dt)  # distinct maxima
    pooled, idx = g.node("MaxPool", [g.input(x)], nout=2, kernel_shape=ks, strides=ss)
    ins = [pooled, idx]
    a = {"kernel_shape": ks, "strides": ss}
    dflt = [(p_ - 1) * s_ + k for p_, s_, k in zip([(d - k) // s_ + 1 for d, k, s_ in zip(sp, ks, ss)], ss, ks)]
    if any(d_ < d for d_, d in zip(dflt, sp)):
        if g.since() < 11:
            raise Reject("MaxUnpool default shape smaller than the pooled input")
        ins.append(g.const(np.array(list(x.shape), np.int64)))
    elif g.since() >= 11 and g.coin(0.4):
        ins.append(g.const(np.array(list(x.shape), np.int64)))
    g.out(g.node("MaxUnpool", ins, **a))


@gen("MaxRoiPool", tol="exact")
def g_maxroipool(g):
    dt = g.types("T")
    H, W = g.ri(3, 10), g.ri(3, 10)
    x = g.data([1, g.ri(1, 3), H, W], dt, special=False)
    n = g.ri(1, 3)
    rois = []
    for _ in range(n):
        x1, y1 = g.ri(0, W - 2), g.ri(0, H - 2)
        rois.append([0, x1, y1, g.ri(x1, W - 1), g.ri(y1, H - 1)])
    a = {"pooled_shape": [g.ri(1, 3), g.ri(1, 3)]}
    if g.coin(0.4):
        a["spatial_scale"] = g.choice([0.5, 1.0, 2.0])
    rn = g.const(np.array(rois, dt), p_input=0.4)
    g.out(g.node("MaxRoiPool", [g.input(x), rn], **a))
    g.alt_params[rn] = lambda rng, r=np.array(rois, dt): r   # the batch index column must stay valid


# ---- normalization

@gen("BatchNormalization", tol="acc")
def g_batchnorm(g):
    dt = g.types("T")
    ver = g.since()
    s = [g.ri(1, 3), g.ri(1, 5)] + g.shape(0, 3, cap=200)
    C = s[1]
    a = {}
    if g.coin(0.5):
        a["epsilon"] = g.choice([1e-5, 1e-3, 0.1])
    if g.coin(0.2):
        a["momentum"] = 0.8
    pdt = dt
    if ver >= 15 and g.coin(0.3):
        pdt = g.types("T1")
    mdt = pdt if ver < 14 else (g.types("U" if ver == 14 else "T2") if g.coin(0.3) else pdt)
    if ver < 14 and mdt != dt:
        mdt = dt
    cs = [C]
    if ver < 9 and g.coin(0.2):
        a["spatial"] = 0
        cs = s[1:]
    x = g.data(s, dt)
    ins = [g.input(x), g.const(g.data(cs, pdt, special=False), p_input=0.3),
           g.const(g.data(cs, pdt, special=False), p_input=0.3),
           g.const(g.data(cs, mdt, special=False), p_input=0.3),
           g.const(g.data(cs, mdt, 0.1, 3.0, special=False), p_input=0.3)]
    g.out(g.node("BatchNormalization", ins, **a))


@gen("InstanceNormalization", tol="acc")
def g_instnorm(g):
    dt = g.types("T")
    s = [g.ri(1, 3), g.ri(1, 5)] + g.shape(1, 3, cap=200)
    a = {"epsilon": g.choice([1e-5, 1e-2])} if g.coin(0.5) else {}
    ins = [g.input(g.data(s, dt)), g.const(g.data([s[1]], dt, special=False), p_input=0.3),
           g.const(g.data([s[1]], dt, special=False), p_input=0.3)]
    g.out(g.node("InstanceNormalization", ins, **a))


@gen("LayerNormalization", tol="acc")
def g_layernorm(g):
    dt = g.types("T")
    s = g.shape(1, 4)
    r = len(s)
    axis = g.axis(r) if g.coin(0.8) else -1
    a = {}
    if axis != -1 or g.coin(0.3):
        a["axis"] = axis
    if g.coin(0.4):
        a["epsilon"] = g.choice([1e-5, 1e-3, 0.5])
    if g.coin(0.2):
        a["stash_type"] = 1
    ns = s[axis:] if axis < 0 else s[axis:]
    if g.coin(0.2) and len(ns) > 1:
        ns = [1] * (len(ns) - 1) + ns[-1:]  # scale broadcast over the normalized shape
    ins = [g.input(g.data(s, dt)), g.const(g.data(ns, dt, special=False), p_input=0.3)]
    if g.coin(0.6):
        ins.append(g.const(g.data(ns, dt, special=False), p_input=0.3))
    nout = g.choice([1, 1, 2, 3])
    outs = g.node("LayerNormalization", ins, nout=nout, **a)
    g.out(*(outs if nout > 1 else [outs]))


@gen("LRN", tol="acc")
def g_lrn(g):
    dt = g.types("T")
    s = [g.ri(1, 2), g.ri(1, 9), g.ri(1, 5), g.ri(1, 5)]
    a = {"size": g.ri(1, 6)}
    if g.coin(0.5):
        a["alpha"] = g.choice([1e-4, 0.01, 0.5])
    if g.coin(0.5):
        a["beta"] = g.choice([0.75, 0.5, 1.0, 2.0])
    if g.coin(0.5):
        a["bias"] = g.choice([1.0, 2.0, 0.5])
    xn = g.input(g.data(s, dt))
    g.out(g.node("LRN", [xn], **a))

    def oracle(feeds, a=dict(a), xn=xn):
        x = feeds[xn].astype(np.float64)
        size, alpha, beta, bias = a["size"], a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("bias", 1.0)
        alpha, beta, bias = (float(np.float32(v)) for v in (alpha, beta, bias))
        C = x.shape[1]
        sq = np.zeros_like(x)
        for c in range(C):
            lo_, hi_ = max(0, c - (size - 1) // 2), min(C - 1, c + (size - 1 + 1) // 2)
            sq[:, c] = np.sum(x[:, lo_:hi_ + 1] ** 2, axis=1)
        return [(x / (bias + alpha / size * sq) ** beta).astype(feeds[xn].dtype)]
    g.np_oracle = oracle


@gen("MeanVarianceNormalization", tol="acc")
def g_mvn(g):
    dt = g.types("T")
    a = {}
    if g.coin(0.4):
        s = [g.ri(1, 3), g.ri(1, 4), g.ri(1, 5), g.ri(1, 5)]
    else:
        s = g.shape(1, 4)
        r = len(s)
        k = g.ri(1, r)
        axes = sorted(int(v) for v in g.rng.choice(r, k, replace=False))
        if g.since() >= 13:
            axes = [v - r if g.coin(0.3) else v for v in axes]
        a["axes"] = axes
    y = g.node("MeanVarianceNormalization", [g.input(g.data(s, dt))], **a)
    g.out(y)
    g.force_out = {y: (tp(dt), list(s))}  # onnx's inference through the function body fails at random


@gen("LpNormalization", tol="acc")
def g_lpnorm(g):
    dt = g.types("T")
    s = g.shape(1, 4)
    a = {}
    if g.coin(0.7):
        a["axis"] = g.axis(len(s))
    if g.coin(0.7):
        a["p"] = g.choice([1, 2])
    g.out(g.node("LpNormalization", [g.input(g.data(s, dt))], **a))


# ---- quantization

def _qparams(g, x_shape, axis, per_axis, qdt, scale_lo=0.01, scale_hi=0.5):
    n = x_shape[axis] if per_axis else None
    sshape = [n] if per_axis else []
    scale = g.rng.uniform(scale_lo, scale_hi, sshape).astype(np.float32)
    info = np.iinfo(qdt)
    zp = g.rng.integers(max(info.min, -20), min(info.max, 20) + 1, sshape).astype(qdt)
    if qdt == np.uint8:
        zp = g.rng.integers(100, 156, sshape).astype(qdt)
    return scale, zp


@gen("QuantizeLinear", tol="exact")
def g_quantize(g):
    s = g.shape(0, 4)
    x = g.data(s, np.float32, scale=g.choice([1.0, 10.0, 100.0]), special=False)
    if g.coin(0.4):
        x = (np.round(x * 4) / 4).astype(np.float32)  # exact halves after scaling 0.5
    per_axis = g.since() >= 13 and len(s) >= 1 and g.coin(0.5)
    axis = g.axis(len(s)) if per_axis else 1
    qdt = g.choice([np.uint8, np.int8])
    scale, zp = _qparams(g, s, axis, per_axis, qdt)
    if g.coin(0.3):
        scale = np.full(scale.shape, 0.5, np.float32)
    a = {}
    if per_axis and (axis != 1 or g.coin(0.5)):
        a["axis"] = axis
    ins = [g.input(x), g.const(scale, p_input=0.3)]
    if qdt == np.int8 or g.coin(0.7):
        ins.append(g.const(zp, p_input=0.3))
    g.out(g.node("QuantizeLinear", ins, **a))


@gen("DequantizeLinear", tol="ew")
def g_dequantize(g):
    s = g.shape(0, 4)
    qdt = g.choice([np.uint8, np.int8, np.int32])
    x = g.data(s, qdt, special=False) if qdt != np.int32 else g.data(s, qdt, -1000, 1000)
    if qdt != np.int32:
        x = g.data(s, qdt, np.iinfo(qdt).min, np.iinfo(qdt).max)
    per_axis = g.since() >= 13 and len(s) >= 1 and g.coin(0.5)
    axis = g.axis(len(s)) if per_axis else 1
    scale, zp = _qparams(g, s, axis, per_axis, qdt if qdt != np.int32 else np.int8)
    if qdt == np.int32:
        zp = np.zeros(zp.shape, np.int32)
    a = {}
    if per_axis and (axis != 1 or g.coin(0.5)):
        a["axis"] = axis
    ins = [g.input(x), g.const(scale, p_input=0.3)]
    if qdt != np.uint8 or g.coin(0.7):
        if qdt != np.int32 or g.coin(0.5):
            ins.append(g.const(zp, p_input=0.3))
    g.out(g.node("DequantizeLinear", ins, **a))


@gen("DynamicQuantizeLinear", tol="exact")
def g_dynq(g):
    x = g.data(g.shape(1, 3), np.float32, special=False)
    y, sc, zp = g.node("DynamicQuantizeLinear", [g.input(x)], nout=3)
    g.out(y, sc, zp)
    g.tol = "dynq"


@gen("MatMulInteger", tol="exact")
def g_matmulinteger(g):
    adt, bdt = g.choice([np.uint8, np.int8]), g.choice([np.uint8, np.int8])
    M, K, N = g.dim(), g.dim(), g.dim()
    batch = g.shape(0, 1, cap=4)
    a = g.data(batch + [M, K], adt, np.iinfo(adt).min, np.iinfo(adt).max)
    b = g.data([K, N], bdt, np.iinfo(bdt).min, np.iinfo(bdt).max)
    ins = [g.input(a), g.const(b, p_input=0.5)]
    if g.coin(0.6):
        ins.append(g.const(np.array(g.ri(0, 20) if adt == np.uint8 else g.ri(-5, 5), adt)))
        if g.coin(0.6):
            bz = np.array(g.ri(0, 20) if bdt == np.uint8 else g.ri(-5, 5), bdt)
            if g.coin(0.4):
                bz = g.data([N], bdt, 0, 10)
            ins.append(g.const(bz))
    g.out(g.node("MatMulInteger", ins))


@gen("ConvInteger", tol="exact")
def g_convinteger(g):
    adt, bdt = g.choice([np.uint8, np.int8]), g.choice([np.uint8, np.int8])
    nd = g.choice([1, 2])
    C, M = g.ri(1, 3), g.ri(1, 3)
    ks = [g.ri(1, 3) for _ in range(nd)]
    sp = [g.ri(k, k + 5) for k in ks]
    a = {}
    if g.coin(0.4):
        a["pads"] = [g.ri(0, k - 1) for k in ks] * 2
    if g.coin(0.4):
        a["strides"] = [g.ri(1, 2)] * nd
    x = g.data([1, C] + sp, adt, np.iinfo(adt).min, np.iinfo(adt).max)
    w = g.data([M, C] + ks, bdt, np.iinfo(bdt).min, np.iinfo(bdt).max)
    ins = [g.input(x), g.const(w, p_input=0.3)]
    if g.coin(0.6):
        ins.append(g.const(np.array(g.ri(0, 20) if adt == np.uint8 else g.ri(-5, 5), adt)))
    g.out(g.node("ConvInteger", ins, **a))


@gen("QLinearMatMul", tol="q1")
def g_qlinearmatmul(g):
    adt = g.choice([np.uint8, np.int8])
    bdt = adt if g.coin(0.7) else g.choice([np.uint8, np.int8])
    ydt = g.choice([np.uint8, np.int8])
    M, K, N = g.dim(), g.dim(), g.dim()
    a = g.data([M, K], adt, np.iinfo(adt).min, np.iinfo(adt).max)
    b = g.data([K, N], bdt, np.iinfo(bdt).min, np.iinfo(bdt).max)

    def sz(dt):
        return (g.const(np.array(g.rng.uniform(0.01, 0.1), np.float32)),
                g.const(np.array(g.ri(100, 150) if dt == np.uint8 else g.ri(-10, 10), dt)))
    sa, za = sz(adt)
    sb, zb = sz(bdt)
    sy_ = g.const(np.array(g.rng.uniform(0.05, 2.0), np.float32))
    zy = g.const(np.array(g.ri(100, 150) if ydt == np.uint8 else g.ri(-10, 10), ydt))
    g.out(g.node("QLinearMatMul", [g.input(a), sa, za, g.const(b, p_input=0.3), sb, zb, sy_, zy]))


@gen("QLinearConv", tol="q1")
def g_qlinearconv(g):
    adt = g.choice([np.uint8, np.int8])
    wdt = g.choice([np.uint8, np.int8])
    C, M = g.ri(1, 3), g.ri(1, 4)
    ks = [g.ri(1, 3), g.ri(1, 3)]
    sp = [g.ri(k, k + 5) for k in ks]
    x = g.data([1, C] + sp, adt, np.iinfo(adt).min, np.iinfo(adt).max)
    w = g.data([M, C] + ks, wdt, np.iinfo(wdt).min, np.iinfo(wdt).max)
    ws = np.array(g.rng.uniform(0.01, 0.05), np.float32) if g.coin(0.5) else \
        g.rng.uniform(0.01, 0.05, [M]).astype(np.float32)
    wz = np.array(0 if wdt == np.int8 else 128, wdt)
    ins = [g.input(x), g.const(np.array(0.05, np.float32)),
           g.const(np.array(g.ri(100, 150) if adt == np.uint8 else g.ri(-5, 5), adt)),
           g.const(w), g.const(ws), g.const(wz), g.const(np.array(g.rng.uniform(0.2, 2.0), np.float32)),
           g.const(np.array(128 if adt == np.uint8 else 0, adt))]
    if g.coin(0.5):
        ins.append(g.const(g.data([M], np.int32, -1000, 1000)))
    a = {"pads": [1, 1, 1, 1]} if g.coin(0.3) else {}
    g.out(g.node("QLinearConv", ins, **a))


# ---- shape and data movement

def _any_dtype(g, param="T"):
    return g.types(param, p_prefer=0.4)


@gen("Reshape", tol="exact")
def g_reshape(g):
    dt = _any_dtype(g)
    s = g.shape(0, 4)
    n = int(np.prod(s))
    # factorize n into a random new shape
    fac, m = [], n
    for p in (2, 3, 5, 7, 11, 13, 17):
        while m % p == 0:
            fac.append(p)
            m //= p
    if m > 1:
        fac.append(m)
    g.rng.shuffle(fac)
    rank = g.ri(1, 4) if fac else g.ri(0, 3)
    new = [1] * rank
    for f in fac:
        if rank == 0:
            new, rank = [1], 1
        new[g.ri(0, rank - 1)] *= f
    a = {}
    spec = list(new)
    if spec and g.coin(0.4):
        spec[g.ri(0, len(spec) - 1)] = -1
    if g.coin(0.3):  # 0 copies the input's dim (allowzero=0)
        for i in range(min(len(spec), len(s))):
            if spec[i] == s[i] and g.coin(0.5) and -1 not in spec[:i]:
                spec[i] = 0
        if spec.count(-1) > 1:
            raise Reject("two -1")
    if g.since() >= 14 and g.coin(0.3) and 0 not in spec:
        a["allowzero"] = 1
    g.desc["shape"] = spec
    x = g.data(s, dt)
    sn = g.const(np.array(spec, np.int64), p_input=0.35)
    g.out(g.node("Reshape", [g.input(x), sn], **a))

    def other(rng, n=n):
        divs = [d for d in range(1, n + 1) if n % d == 0]
        d0 = int(divs[int(rng.integers(0, len(divs)))])
        r_ = int(rng.integers(0, 3))
        return np.array([[n], [d0, -1], [-1, d0, 1]][r_], np.int64)
    g.alt_params[sn] = other


@gen("Flatten", tol="exact")
def g_flatten(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4)
    r = len(s)
    a = {}
    if g.coin(0.8):
        ax = g.ri(0, r)
        if g.since() >= 11 and g.coin(0.4):
            ax -= r
        a["axis"] = ax
    g.out(g.node("Flatten", [g.input(g.data(s, dt))], **a))


@gen("Transpose", tol="exact")
def g_transpose(g):
    dt = _any_dtype(g)
    s = g.shape(1, 5, cap=2000)
    a = {}
    if g.coin(0.8):
        a["perm"] = [int(v) for v in g.rng.permutation(len(s))]
    g.out(g.node("Transpose", [g.input(g.data(s, dt))], **a))


@gen("Squeeze", tol="exact")
def g_squeeze(g):
    dt = _any_dtype(g)
    s = g.shape(1, 5, cap=2000)
    for i in range(len(s)):
        if g.coin(0.4):
            s[i] = 1
    ones = [i for i, d in enumerate(s) if d == 1]
    r = len(s)
    axes = None
    if ones and g.coin(0.8):
        k = g.ri(1, len(ones))
        axes = [int(v) for v in g.rng.choice(ones, k, replace=False)]
        if g.since() >= 11:
            axes = [v - r if g.coin(0.4) else v for v in axes]
    ins = [g.input(g.data(s, dt))]
    a = {}
    if axes is not None:
        g.axes(axes, ins, a, g.since() >= 13)
    g.out(g.node("Squeeze", ins, **a))


@gen("Unsqueeze", tol="exact")
def g_unsqueeze(g):
    dt = _any_dtype(g)
    s = g.shape(0, 4)
    k = g.ri(1, 3)
    ro = len(s) + k
    axes = [int(v) for v in g.rng.choice(ro, k, replace=False)]
    if g.since() >= 11:
        axes = [v - ro if g.coin(0.4) else v for v in axes]
    ins = [g.input(g.data(s, dt))]
    a = {}
    g.axes(axes, ins, a, g.since() >= 13)
    g.out(g.node("Unsqueeze", ins, **a))


@gen("Expand", tol="exact")
def g_expand(g):
    dt = _any_dtype(g)
    out = g.shape(0, 4)
    xs = g.bshapes(out, 1)[0]
    shp = list(out)
    if g.coin(0.3):  # the shape may be smaller than the input (bidirectional)
        shp = [1 if (g.coin(0.5)) else d for d in shp]
        k = g.ri(0, len(shp))
        shp = shp[k:]
    g.desc["shape"] = shp
    sn = g.const(np.array(shp, np.int64), p_input=0.35)
    g.out(g.node("Expand", [g.input(g.data(xs, dt)), sn]))

    def other(rng, xs=list(xs)):
        return np.array([int(rng.integers(1, 4)) if d == 1 else d for d in xs] if xs else [int(rng.integers(1, 4))],
                        np.int64)
    g.alt_params[sn] = other


@gen("Tile", tol="exact")
def g_tile(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4, cap=300)
    reps = [g.choice([1, 1, 2, 3]) for _ in s]
    rn = g.const(np.array(reps, np.int64), p_input=0.35)
    g.out(g.node("Tile", [g.input(g.data(s, dt)), rn]))
    g.alt_params[rn] = lambda rng, k=len(s): rng.integers(1, 4, k).astype(np.int64)


@gen("Concat", tol="exact")
def g_concat(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4)
    r = len(s)
    ax = g.axis(r, neg_ok=g.since() >= 11)
    ins = []
    for _ in range(g.choice([1, 2, 2, 3, 4])):
        t = list(s)
        t[ax] = g.ri(1, 5)
        ins.append(g.input(g.data(t, dt)) if g.coin(0.8) else g.const(g.data(t, dt)))
    g.out(g.node("Concat", ins, axis=ax))


@gen("Split", tol="exact")
def g_split(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4)
    r = len(s)
    ax = g.axis(r, neg_ok=g.since() >= 11) if g.coin(0.8) else 0
    n = s[ax]
    a = {"axis": ax} if ax != 0 or g.coin(0.5) else {}
    ins = [g.input(g.data(s, dt))]
    if g.coin(0.5):
        k = g.ri(1, min(n, 4))
        cuts = sorted(int(v) for v in g.rng.choice(np.arange(1, n), k - 1, replace=False)) if k > 1 else []
        parts = [b - a_ for a_, b in zip([0] + cuts, cuts + [n])]
        if g.since() >= 13:
            ins.append(g.const(np.array(parts, np.int64), p_input=0.2))
        else:
            a["split"] = parts
        g.desc["split"] = parts
        nout = len(parts)
    else:
        divs = [d for d in range(1, min(n, 4) + 1) if n % d == 0]
        nout = g.choice(divs)
    outs = g.node("Split", ins, nout=nout, **a)
    g.out(*(outs if nout > 1 else [outs]))


def _onnx_slice_len(dim, st, en, sp):
    if st < 0:
        st += dim
    if en < 0:
        en += dim
    if sp > 0:
        st = min(max(st, 0), dim)
        en = min(max(en, 0), dim)
        return max(0, (en - st + sp - 1) // sp)
    st = min(max(st, 0), dim - 1)
    en = min(max(en, -1), dim - 1)
    return max(0, (st - en + (-sp) - 1) // (-sp))


@gen("Slice", tol="exact")
def g_slice(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4)
    r = len(s)
    k = g.ri(1, r)
    axes = [int(v) for v in g.rng.choice(r, k, replace=False)]
    starts, ends, steps = [], [], []
    big = [2**63 - 1, -2**63, 2**31, -2**31, 1000, -1000]
    for ax in axes:
        d = s[ax]
        for _ in range(50):
            sp = 1
            if g.since() >= 10 and g.coin(0.5):
                sp = g.choice([1, 2, 3, -1, -1, -2, -3])
            st = g.ri(-d - 2, d + 2) if not g.coin(0.1) else g.choice(big)
            en = g.ri(-d - 2, d + 2) if not g.coin(0.2) else g.choice(big)
            if _onnx_slice_len(d, st, en, sp) > 0:
                break
        else:
            st, en, sp = 0, d, 1
        starts.append(st)
        ends.append(en)
        steps.append(sp)
    if g.since() >= 11:
        axes = [v - r if g.coin(0.4) else v for v in axes]
    x = g.data(s, dt)
    g.desc.update(starts=starts, ends=ends, axes=axes, steps=steps)
    if g.since() < 10:
        a = {"starts": starts, "ends": ends}
        if g.coin(0.7) or sorted(axes) != list(range(len(axes))):
            a["axes"] = axes
        g.out(g.node("Slice", [g.input(x)], **a))
        return
    it = g.choice([np.int64, np.int32])
    if it == np.int32:
        starts = [int(np.clip(v, -2**31, 2**31 - 1)) for v in starts]
        ends = [int(np.clip(v, -2**31, 2**31 - 1)) for v in ends]
    ins = [g.input(x), g.const(np.array(starts, it), p_input=0.3), g.const(np.array(ends, it), p_input=0.15)]

    def other_starts(rng, steps=list(steps), dims=[s[ax] for ax in axes], it=it):
        # the extreme start on the step's side: a different value, a slice that stays non-empty
        return np.array([(0 if rng.random() < 0.5 else -d - 5) if sp > 0 else (d - 1 if rng.random() < 0.5 else d + 5)
                         for sp, d in zip(steps, dims)], it)
    g.alt_params[ins[1]] = other_starts
    full_axes = sorted(axes) == list(range(r)) and axes == sorted(axes)
    with_steps = any(v != 1 for v in steps) or g.coin(0.3)
    if not full_axes or g.coin(0.6) or with_steps:
        ins.append(g.const(np.array(axes, it), p_input=0.1))
    if with_steps:
        ins.append(g.const(np.array(steps, it), p_input=0.1))
    g.out(g.node("Slice", ins))


def _indices(g, n, shape, neg_ok, dt=None):
    dt = dt or g.choice([np.int64, np.int32])
    idx = g.rng.integers(0, n, shape)
    if neg_ok:
        m = g.rng.random(shape) < 0.4
        idx = np.where(m, idx - n, idx)
    return _c(idx.astype(dt))


@gen("Gather", tol="exact")
def g_gather(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4)
    r = len(s)
    ax = g.axis(r, neg_ok=g.since() >= 11) if g.coin(0.8) else 0
    ishape = g.shape(0, 2, cap=20)
    idx = _indices(g, s[ax], ishape, g.since() >= 11)
    a = {"axis": ax} if ax != 0 or g.coin(0.5) else {}
    iname = g.const(idx, p_input=0.5)
    g.out(g.node("Gather", [g.input(g.data(s, dt)), iname], **a))
    g.alt_params[iname] = lambda rng, n=s[ax], sh=list(idx.shape), dt_=idx.dtype, neg=g.since() >= 11: \
        (rng.integers(-n if neg else 0, n, sh)).astype(dt_)


@gen("GatherElements", tol="exact")
def g_gatherelements(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4)
    r = len(s)
    ax = g.axis(r)
    ish = [g.ri(1, d) for d in s]
    ish[ax] = g.ri(1, s[ax] + 3)
    idx = _indices(g, s[ax], ish, True)
    g.out(g.node("GatherElements", [g.input(g.data(s, dt)), g.const(idx, p_input=0.5)], axis=ax))


@gen("GatherND", tol="exact")
def g_gathernd(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4)
    r = len(s)
    b = g.ri(0, r - 1) if g.since() >= 12 and g.coin(0.4) else 0
    k = g.ri(1, r - b)
    q = g.ri(b + 1, b + 2)
    ish = list(s[:b]) + [g.ri(1, 3) for _ in range(q - b - 1)] + [k]
    idx = np.zeros(ish, np.int64)
    for j in range(k):
        n = s[b + j]
        idx[..., j] = _indices(g, n, ish[:-1], True, np.int64)
    a = {"batch_dims": b} if b or g.coin(0.3) and g.since() >= 12 else {}
    g.out(g.node("GatherND", [g.input(g.data(s, dt)), g.const(idx, p_input=0.5)], **a))


@gen("ScatterND", tol="ew")
def g_scatternd(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4)
    r = len(s)
    k = g.ri(1, r)
    red = None
    if g.since() >= 16 and g.coin(0.6):
        red = g.choice(["add", "mul", "none"])
    q = g.ri(1, 2)
    lead = [g.ri(1, 3) for _ in range(q - 1)]
    nup = int(np.prod(lead)) if lead else 1
    cells = int(np.prod(s[:k]))
    if red in (None, "none"):
        if nup > cells:
            lead, nup = [cells], cells
            if q == 1:
                lead, nup = [], 1
        flat = g.rng.choice(cells, nup, replace=False)
    else:
        flat = g.rng.integers(0, cells, nup)  # duplicates allowed with a reduction
    coords = np.stack(np.unravel_index(flat, s[:k]), axis=-1).reshape(lead + [k]).astype(np.int64)
    if g.coin(0.5):
        coords = np.where(g.rng.random(coords.shape) < 0.4, coords - np.array(s[:k]), coords)
    ush = lead + s[k:]
    data = g.data(s, dt)
    upd = g.data(ush, dt)
    a = {"reduction": red} if red else {}
    g.out(g.node("ScatterND", [g.input(data), g.const(coords, p_input=0.4), g.input(upd)], **a))


@gen("ScatterElements", "Scatter", tol="ew")
def g_scatterelements(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4)
    r = len(s)
    ax = g.axis(r, neg_ok=g.since() >= 11)
    axp = ax % r
    red = None
    if g.op == "ScatterElements" and g.since() >= 16 and g.coin(0.6):
        red = g.choice(["add", "mul", "none"])
    ish = [g.ri(1, d) for d in s]
    # distinct positions along the axis for each line unless a reduction is set
    idx = np.zeros(ish, np.int64)
    for pos in np.ndindex(*[ish[i] for i in range(r) if i != axp]):
        if red in (None, "none"):
            vals = g.rng.choice(s[ax], ish[ax], replace=False)
        else:
            vals = g.rng.integers(0, s[ax], ish[ax])
        sl = list(pos)
        sl.insert(axp, slice(None))
        idx[tuple(sl)] = vals
    if g.since() >= 11 and g.coin(0.5):
        idx = np.where(g.rng.random(idx.shape) < 0.4, idx - s[ax], idx)
    idx = idx.astype(g.choice([np.int64, np.int32]))
    a = {"axis": ax}
    if red:
        a["reduction"] = red
    g.out(g.node(g.op, [g.input(g.data(s, dt)), g.const(idx, p_input=0.4), g.input(g.data(ish, dt))], **a))


@gen("Pad", tol="exact")
def g_pad(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4, cap=500)
    r = len(s)
    mode = g.choice(["constant", "constant", "reflect", "edge"])
    pads = []
    for i in range(2 * r):
        d = s[i % r]
        if mode == "reflect":
            p = g.ri(0, d - 1) if d > 1 else 0
        else:
            p = g.ri(0, 3)
        if g.coin(0.15) and d > 1:
            p = -g.ri(1, d - 1)  # negative pads crop
        pads.append(p)
    for i in range(r):
        if s[i] + pads[i] + pads[i + r] < 1:
            pads[i] = pads[i + r] = 0
    a = {}
    if mode != "constant" or g.coin(0.5):
        a["mode"] = mode
    x = g.data(s, dt)
    cv = None
    if mode == "constant" and g.coin(0.6):
        cv = g.choice([1.5, -2.0, 0.0, 7.0]) if isfloat(dt) else g.choice([1, 7, 0])
        if dt == np.bool_:
            cv = True
    g.desc["pads"] = pads
    if g.since() < 11:
        a["pads"] = pads
        if cv is not None:
            a["value"] = float(cv)
        g.out(g.node("Pad", [g.input(x)], **a))
        return
    ins = [g.input(x), g.const(np.array(pads, np.int64), p_input=0.3)]
    if mode != "reflect":
        g.alt_params[ins[1]] = lambda rng, k=2 * r: rng.integers(0, 3, k).astype(np.int64)
    if cv is not None:
        ins.append(g.const(np.array(cv, dt), p_input=0.2))
    g.out(g.node("Pad", ins, **a))


@gen("DepthToSpace", "SpaceToDepth", tol="exact")
def g_d2s(g):
    dt = _any_dtype(g)
    b = g.ri(1, 3)
    a = {"blocksize": b}
    if g.op == "DepthToSpace":
        s = [g.ri(1, 2), g.ri(1, 3) * b * b, g.ri(1, 4), g.ri(1, 4)]
        if g.since() >= 11 and g.coin(0.7):
            a["mode"] = g.choice(["DCR", "CRD"])
    else:
        s = [g.ri(1, 2), g.ri(1, 3), g.ri(1, 3) * b, g.ri(1, 3) * b]
    g.out(g.node(g.op, [g.input(g.data(s, dt))], **a))


@gen("Trilu", tol="exact")
def g_trilu(g):
    dt = _any_dtype(g)
    s = g.shape(0, 2, cap=6) + [g.ri(1, 6), g.ri(1, 6)]
    ins = [g.input(g.data(s, dt))]
    if g.coin(0.6):
        ins.append(g.const(np.array(g.ri(-7, 7), np.int64), p_input=0.3))
    a = {"upper": g.ri(0, 1)} if g.coin(0.7) else {}
    g.out(g.node("Trilu", ins, **a))


@gen("EyeLike", tol="exact")
def g_eyelike(g):
    dt = _any_dtype(g, "T1")
    s = [g.ri(1, 6), g.ri(1, 6)]
    a = {}
    if g.coin(0.6):
        a["k"] = g.ri(-6, 6)
    if g.coin(0.5):
        a["dtype"] = tp(g.types("T2"))
    g.out(g.node("EyeLike", [g.input(g.data(s, dt))], **a))


@gen("OneHot", tol="exact")
def g_onehot(g):
    it = g.types("T1", prefer=np.int64)
    dd = g.types("T2", prefer=np.int64)
    vt = g.types("T3")
    depth = g.ri(1, 6)
    s = g.shape(1, 3, cap=30)
    lo = -depth - 1 if g.since() >= 11 else 0
    if isfloat(it):
        ind = g.rng.integers(lo, depth + 1, s).astype(it)
    else:
        ind = g.data(s, it, max(lo, int(np.iinfo(it).min)), depth + 1, special=False)
    r = len(s) + 1
    a = {}
    if g.coin(0.7):
        a["axis"] = g.axis(r, neg_ok=True) if g.since() >= 11 else g.choice([-1, *range(r)])
    vals = g.data([2], vt, special=False)
    dv = np.array(depth, dd) if g.coin(0.7) else np.array([depth], dd)
    g.out(g.node("OneHot", [g.input(ind), g.const(dv, p_input=0.2), g.const(vals, p_input=0.3)], **a))

    # Where onnxruntime has no kernel for the types, the evaluator is no oracle: it computes
    # (on - off) * onehot + off in float arithmetic, a last-bit difference from the values
    # themselves. The operator's definition instead: indices truncated to integers, a negative
    # one plus depth, on_value where it equals the position along axis, off_value elsewhere.
    def oracle(feeds, ind=ind, depth=depth, vals=vals, axis=a.get("axis", -1)):
        x = np.trunc(ind).astype(np.int64) if isfloat(ind.dtype) else ind.astype(np.int64)
        x = np.where(x < 0, x + depth, x)
        r = x.ndim + 1
        ax = axis + r if axis < 0 else axis
        k = np.arange(depth).reshape([depth if i == ax else 1 for i in range(r)])
        hit = (np.expand_dims(x, ax) == k) & np.expand_dims((x >= 0) & (x < depth), ax)
        return [np.where(hit, vals[1], vals[0]).astype(vals.dtype)]
    g.np_oracle = oracle


@gen("Range", tol="acc")
def g_range(g):
    dt = g.types("T")
    if isfloat(dt):
        st = float(g.choice([0.0, 1.5, -3.0, 0.1]))
        de = float(g.choice([1.0, 0.5, -0.7, 0.3, 2.5, -1.0]))
        n = g.ri(1, 20)
        li = st + de * n - de * g.choice([0.0, 0.5, 0.01])
    else:
        st = g.ri(-10, 10)
        de = g.choice([1, 2, 3, -1, -2, 5])
        n = g.ri(1, 20)
        li = st + de * n - (g.ri(0, abs(de) - 1) * (1 if de > 0 else -1) if abs(de) > 1 else 0)
    ins = [g.const(np.array(v, dt), p_input=0.4) for v in (st, li, de)]
    g.desc.update(start=st, limit=li, delta=de)
    g.out(g.node("Range", ins))


@gen("Shape", "Size", tol="exact")
def g_shape(g):
    dt = _any_dtype(g)
    s = g.shape(0, 5)
    a = {}
    if g.op == "Shape" and g.since() >= 15:
        r = len(s)
        if g.coin(0.5):
            a["start"] = g.ri(-r - 2, r + 1)
        if g.coin(0.5):
            a["end"] = g.ri(-r - 2, r + 1)
        st = a.get("start", 0)
        en = a.get("end", r)
        st = min(max(st + r if st < 0 else st, 0), r)
        en = min(max(en + r if en < 0 else en, 0), r)
        if en - st <= 0:
            raise Reject("empty Shape")
    g.out(g.node(g.op, [g.input(g.data(s, dt))], **a))


@gen("ConstantOfShape", tol="exact")
def g_constantofshape(g):
    s = g.shape(1, 4)
    a = {}
    if g.coin(0.7):
        vt = g.choice([np.float32, np.int64, np.int32, np.float16, np.bool_, np.uint8, np.float64])
        v = np.array([g.choice([1, 0, 3, -2]) if vt != np.bool_ else True], dtype=vt)
        if vt in UINTS:
            v = np.abs(v)
        a["value"] = numpy_helper.from_array(v, "value")
    sn = g.const(np.array(s, np.int64), p_input=0.4)
    g.out(g.node("ConstantOfShape", [sn], **a))
    g.alt_params[sn] = lambda rng, r=len(s): rng.integers(1, 6, r).astype(np.int64)


@gen("Compress", tol="exact")
def g_compress(g):
    dt = _any_dtype(g)
    s = g.shape(1, 4)
    r = len(s)
    a = {}
    if g.coin(0.7):
        ax = g.axis(r, neg_ok=g.since() >= 11)
        a["axis"] = ax
        n = s[ax]
    else:
        n = int(np.prod(s))
    L = g.ri(1, n)
    c = g.rng.random(L) < 0.6
    if not c.any():
        c[g.ri(0, L - 1)] = True
    g.out(g.node("Compress", [g.input(g.data(s, dt)), g.const(c, p_input=0.4)], **a))


@gen("ReverseSequence", tol="exact")
def g_reversesequence(g):
    dt = _any_dtype(g)
    s = [g.ri(1, 6), g.ri(1, 6)] + g.shape(0, 2, cap=10)
    ba = g.ri(0, 1)
    ta = 1 - ba
    a = {}
    if ba == 0 or g.coin(0.4):
        a["batch_axis"] = ba
        a["time_axis"] = ta
    lens = g.rng.integers(1, s[ta] + 1, [s[ba]]).astype(np.int64)
    g.out(g.node("ReverseSequence", [g.input(g.data(s, dt)), g.const(lens, p_input=0.4)], **a))


@gen("NonZero", tol="exact")
def g_nonzero(g):
    dt = _any_dtype(g)
    s = g.shape(0, 4, cap=200)
    x = g.data(s, dt, special=False) if dt != np.bool_ else g.data(s, dt)
    if not np.count_nonzero(x):
        raise Reject("no nonzero")
    g.out(g.node("NonZero", [g.input(x)]))


@gen("Unique", tol="exact")
def g_unique(g):
    dt = g.types("T", only=(np.float32, np.int64, np.int8))
    s = g.shape(1, 3, cap=60)
    x = g.data(s, dt, -3, 3, special=False)
    if isfloat(dt):
        x = np.round(x).astype(dt)
    a = {}
    if g.coin(0.4):
        a["axis"] = g.axis(len(s))
    if g.coin(0.6):
        a["sorted"] = g.ri(0, 1)
    outs = g.node("Unique", [g.input(x)], nout=4, **a)
    g.out(*outs)


# ---- resampling and vision

RESIZE_SCALES = [0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 0.3, 1.7]


@gen("Resize", tol="acc")
def g_resize(g):
    ver = g.since()
    dt = g.types("T1" if ver >= 11 else "T",
                 only=(np.float32, np.float64, np.float16, np.uint8, np.int8, np.int32, np.int64) if
                 g.coin(0.3) else (np.float32,))
    r = g.choice([2, 3, 4, 4, 4]) if g.coin(0.85) else g.choice([1, 5])
    s = [g.ri(1, 2), g.ri(1, 3)] + [g.ri(1, 7) for _ in range(r - 2)] if r >= 3 else [g.ri(1, 7) for _ in range(r)]
    outer = min(2, r - 1) if r >= 3 else 0
    modes = ["nearest", "linear"] + (["cubic"] if ver >= 11 else [])
    mode = g.choice(modes)
    a = {}
    if mode != "nearest" or g.coin(0.5):
        a["mode"] = mode
    ctm = "asymmetric"
    if ver >= 11:
        ctms = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"]
        if ver < 13:  # Resize-11's text names it "tf_half_pixel_for_nn"; onnxruntime knows "..._for_nearest"
            ctms.append(g.choice(["tf_half_pixel_for_nearest", "tf_half_pixel_for_nn"]))
        ctm = g.choice(ctms)
        if ctm != "half_pixel" or g.coin(0.5):
            a["coordinate_transformation_mode"] = ctm
        if mode == "nearest" and g.coin(0.7):
            a["nearest_mode"] = g.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
        if mode == "cubic":
            if g.coin(0.5):
                a["cubic_coeff_a"] = g.choice([-0.75, -0.5])
            if g.coin(0.4):
                a["exclude_outside"] = 1
        if ctm == "tf_crop_and_resize" and g.coin(0.5):
            a["extrapolation_value"] = g.choice([0.0, -1.0, 5.0])
    use_sizes = ver >= 11 and g.coin(0.4)
    scales = [1.0] * r
    for i in range(outer, r):
        scales[i] = g.choice(RESIZE_SCALES)
    if outer and g.coin(0.1):
        scales[outer - 1] = g.choice([2.0, 0.5])
    sizes = [max(1, int(np.floor(d * sc))) for d, sc in zip(s, scales)]
    if use_sizes:
        sizes = [d if i < outer else g.ri(1, 2 * d + 2) for i, d in enumerate(s)]
    elif any(v == 0 for v in (int(np.floor(d * sc)) for d, sc in zip(s, scales))):
        raise Reject("empty Resize")
    x = g.data(s, dt, special=g.special and g.coin(0.3))
    ins = [g.input(x)]
    if ver == 10:
        ins.append(g.const(np.array(scales, np.float32), p_input=0.1))
    else:
        if ctm == "tf_crop_and_resize":
            roi = [0.0] * r + [1.0] * r
            for i in range(outer, r):
                roi[i] = float(g.choice([0.0, 0.125, 0.25, -0.25]))   # dyadic: no rounding in the ROI
                roi[i + r] = float(g.choice([1.0, 0.75, 0.5, 1.25]))
            ins.append(g.const(np.array(roi, np.float32)))
        else:
            ins.append(g.const(np.zeros([0], np.float32)) if ver < 13 or g.coin(0.3) else "")
        if use_sizes:
            ins.append(g.const(np.zeros([0], np.float32)) if ver < 13 or g.coin(0.3) else "")
            ins.append(g.const(np.array(sizes, np.int64), p_input=0.1))
            g.desc["sizes"] = sizes
        else:
            ins.append(g.const(np.array(scales, np.float32), p_input=0.1))
    if not use_sizes:
        g.desc["scales"] = scales
    g.desc["x"] = s
    g.out(g.node("Resize", ins, **a))


@gen("Upsample", tol="acc")
def g_upsample(g):
    dt = g.types("T", only=(np.float32,)) if g.coin(0.8) else g.types("T")
    r = g.choice([2, 3, 4, 4])
    s = [g.ri(1, 2), g.ri(1, 3)] + [g.ri(1, 6) for _ in range(r - 2)] if r >= 3 else [g.ri(1, 6) for _ in range(r)]
    outer = min(2, r - 1) if r >= 3 else 0
    scales = [1.0] * r
    for i in range(outer, r):
        scales[i] = g.choice([1.0, 1.5, 2.0, 3.0, 2.5])
    mode = g.choice(["nearest", "linear"])
    a = {"mode": mode} if mode != "nearest" or g.coin(0.5) else {}
    x = g.data(s, dt)
    g.desc["scales"] = scales
    if g.since() < 9:
        a["scales"] = scales
        g.out(g.node("Upsample", [g.input(x)], **a))
    else:
        g.out(g.node("Upsample", [g.input(x), g.const(np.array(scales, np.float32), p_input=0.1)], **a))


@gen("RoiAlign", tol="acc")
def g_roialign(g):
    dt = g.types("T1")
    N, C, H, W = g.ri(1, 2), g.ri(1, 3), g.ri(2, 9), g.ri(2, 9)
    x = g.data([N, C, H, W], dt, special=False)
    n = g.ri(1, 4)
    rois = []
    for _ in range(n):
        x1, y1 = g.rng.uniform(-1, W), g.rng.uniform(-1, H)
        rois.append([x1, y1, x1 + g.rng.uniform(0.2, W), y1 + g.rng.uniform(0.2, H)])
    bi = g.rng.integers(0, N, n).astype(np.int64)
    a = {}
    if g.coin(0.7):
        a["output_height"] = g.ri(1, 4)
    if g.coin(0.7):
        a["output_width"] = g.ri(1, 4)
    if g.coin(0.6):
        a["sampling_ratio"] = g.ri(0, 3)
    if g.coin(0.5):
        a["spatial_scale"] = g.choice([0.5, 1.0, 0.25])
    if g.coin(0.4):
        a["mode"] = g.choice(["avg", "max"])
    if g.since() >= 16 and g.coin(0.6):
        a["coordinate_transformation_mode"] = g.choice(["half_pixel", "output_half_pixel"])
    g.out(g.node("RoiAlign", [g.input(x), g.const(np.array(rois, dt), p_input=0.5), g.const(bi, p_input=0.3)],
                 **a))


@gen("GridSample", tol="acc")
def g_gridsample(g):
    dt = g.types("T1")
    N, C, H, W = g.ri(1, 2), g.ri(1, 3), g.ri(1, 6), g.ri(1, 6)
    Ho, Wo = g.ri(1, 5), g.ri(1, 5)
    x = g.data([N, C, H, W], dt, special=False)
    grid = g.rng.uniform(-1.3, 1.3, [N, Ho, Wo, 2]).astype(g.types("T2"))
    a = {}
    integral = np.dtype(dt).kind in "iub"
    if g.coin(0.7):  # integer X: no bicubic (below)
        a["mode"] = g.choice(["bilinear", "nearest"] if integral else ["bilinear", "nearest", "bicubic"])
    if g.coin(0.7):
        a["padding_mode"] = g.choice(["zeros", "border", "reflection"])
    if g.coin(0.5):
        a["align_corners"] = g.ri(0, 1)
    xi, gi = g.input(x), g.input(grid)
    y = g.node("GridSample", [xi, gi], **a)
    if integral:
        # Integer or bool X: "computed as floating point and cast to integer at the end" (the
        # schema). onnxruntime has no such kernel, and the evaluator is no oracle here: its linear
        # and cubic modes keep their coefficients in X's integer type (all 0), and for float X it
        # differs from onnxruntime and torch (kiln's model) in nearest + reflection over a size-1
        # dim and in cubic + border. The oracle is onnxruntime on X (small integers: exact) and the
        # grid cast to float32, Y cast back (truncation toward zero; bool: nonzero). It computes
        # in float32 where kiln computes in double: a result within float32's rounding of an
        # integer may truncate to the integers either side. Bicubic, whose 16 taps make that
        # common (all taps on one border pixel: v times weights summing to 1) and whose overshoot
        # below 0 is an undefined cast for unsigned types, is left out for integer X
        # (tests/signal covers it with an exact expectation).
        def alt(model, xi=xi, gi=gi, y=y, t=helper.np_dtype_to_tensor_dtype(np.dtype(dt))):
            m = onnx.ModelProto()
            m.CopyFrom(model)
            gr = m.graph
            gs = [n for n in gr.node if n.op_type == "GridSample"][0]
            gs.input[0], gs.input[1], gs.output[0] = xi + "__f32", gi + "__f32", y + "__f32"
            nodes = list(gr.node)
            del gr.node[:]
            gr.node.extend([helper.make_node("Cast", [xi], [xi + "__f32"], to=TensorProto.FLOAT),
                            helper.make_node("Cast", [gi], [gi + "__f32"], to=TensorProto.FLOAT)] + nodes +
                           [helper.make_node("Cast", [y + "__f32"], [y], to=t)])
            return m
        g.alt_model = alt
    g.out(y)


@gen("NonMaxSuppression", tol="exact")
def g_nms(g):
    B, C, n = g.ri(1, 2), g.ri(1, 2), g.ri(1, 8)
    cpb = g.ri(0, 1) if g.coin(0.5) else None
    boxes = g.rng.uniform(0, 10, [B, n, 4]).astype(np.float32)
    if cpb:
        boxes[..., 2:] = np.abs(boxes[..., 2:]) + 0.5
    scores = g.rng.uniform(0, 1, [B, C, n]).astype(np.float32)
    ins = [g.input(boxes), g.input(scores)]
    k = g.choice([0, 1, 2, 3, 10])
    opt = g.ri(0, 3)
    if opt >= 1:
        ins.append(g.const(np.array([max(k, 1)], np.int64)))
    if opt >= 2:
        ins.append(g.const(np.array([g.choice([0.3, 0.5, 0.0, 1.0])], np.float32)))
    if opt >= 3:
        ins.append(g.const(np.array([g.choice([0.0, 0.2, 0.5])], np.float32)))
    a = {"center_point_box": cpb} if cpb is not None else {}
    g.out(g.node("NonMaxSuppression", ins, **a))


# ---- recurrent

@gen("RNN", "GRU", "LSTM", tol="acc")
def g_rnn(g):
    op = g.op
    dt = np.float32  # onnxruntime runs float only; the evaluator ignores clip and sequence_lens
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    S, B, I, Hd = g.ri(1, 4), g.ri(1, 3), g.ri(1, 4), g.ri(1, 4)
    direction = g.choice(["forward", "reverse", "bidirectional"])
    D = 2 if direction == "bidirectional" else 1
    layout = g.ri(0, 1) if g.since() >= 14 and g.coin(0.3) else 0
    a = {"hidden_size": Hd}
    if direction != "forward" or g.coin(0.3):
        a["direction"] = direction
    if layout:
        a["layout"] = 1
    if op == "GRU" and g.coin(0.5):
        a["linear_before_reset"] = g.ri(0, 1)
    if g.coin(0.2) and not layout:  # onnxruntime refuses layout=1, the evaluator ignores clip
        a["clip"] = 1.5
    xs = [B, S, I] if layout else [S, B, I]
    ins = [g.input(g.data(xs, dt, special=False)),
           g.const(g.data([D, gates * Hd, I], dt, -0.6, 0.6), p_input=0.3),
           g.const(g.data([D, gates * Hd, Hd], dt, -0.6, 0.6), p_input=0.3)]
    opt = []
    if g.coin(0.7):
        opt.append(("B", g.data([D, 2 * gates * Hd], dt, -0.5, 0.5)))
    else:
        opt.append(("B", None))
    if g.coin(0.4) and dt == np.float32:
        opt.append(("sl", g.rng.integers(1, S + 1, [B]).astype(np.int32)))
    else:
        opt.append(("sl", None))
    hs = [B, D, Hd] if layout else [D, B, Hd]
    opt.append(("h", g.data(hs, dt, -1, 1) if g.coin(0.5) else None))
    if op == "LSTM":
        opt.append(("c", g.data(hs, dt, -1, 1) if g.coin(0.5) else None))
        opt.append(("P", g.data([D, 3 * Hd], dt, -0.5, 0.5) if g.coin(0.3) else None))
    for _, v in opt:
        ins.append(g.const(v, p_input=0.3) if v is not None else "")
    while ins[-1] == "":
        ins.pop()
    nout = 3 if op == "LSTM" else 2
    outs = g.node(op, ins, nout=nout, **a)
    if layout:
        def alt(model, op=op, ins=list(ins), outs=list(outs), a=dict(a)):
            m = onnx.ModelProto()
            m.CopyFrom(model)
            gr = m.graph
            del gr.node[:]
            nodes, ins2 = [], list(ins)
            for i in (0, 5, 6):   # X [B,S,I], initial_h / initial_c [B,D,H] -> layout 0
                if i < len(ins2) and ins2[i]:
                    t = ins2[i] + "__l0"
                    nodes.append(helper.make_node("Transpose", [ins2[i]], [t], perm=[1, 0, 2]))
                    ins2[i] = t
            a0 = dict(a)
            a0.pop("layout")
            o0 = [o + "__l0" for o in outs]
            nodes.append(helper.make_node(op, ins2, o0, **a0))
            nodes.append(helper.make_node("Transpose", [o0[0]], [outs[0]], perm=[2, 0, 1, 3]))  # [S,D,B,H]->[B,S,D,H]
            for o, t in zip(outs[1:], o0[1:]):
                nodes.append(helper.make_node("Transpose", [t], [o], perm=[1, 0, 2]))
            gr.node.extend(nodes)
            return m
        g.alt_model = alt
    keep = [o for o in outs if g.coin(0.7)] or [outs[0]]
    g.out(*keep)


# ---- losses

@gen("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", tol="acc")
def g_loss(g):
    dt = g.types("T")
    N, Cc = g.ri(1, 4), g.ri(2, 5)
    extra = g.shape(0, 2, cap=9)
    x = g.data([N, Cc] + extra, dt, special=False)
    a = {}
    red = g.choice(["none", "sum", "mean", None])
    if red:
        a["reduction"] = red
    tgt = g.rng.integers(0, Cc, [N] + extra).astype(g.choice([np.int64, np.int32]))
    if g.coin(0.4):
        ii = g.ri(0, Cc - 1)
        a["ignore_index"] = ii
        tgt.flat[0] = ii
    ins = [g.input(x), g.const(tgt, p_input=0.4)]
    if g.coin(0.5):
        ins.append(g.const(g.data([Cc], dt, 0.1, 2.0), p_input=0.3))
    nout = 2 if g.op == "SoftmaxCrossEntropyLoss" and g.coin(0.4) else 1
    outs = g.node(g.op, ins, nout=nout, **a)
    g.out(*(outs if nout > 1 else [outs]))


# ---- signal

@gen("HannWindow", "HammingWindow", "BlackmanWindow", tol="ew")
def g_window(g):
    a = {}
    if g.coin(0.5):
        a["periodic"] = g.ri(0, 1)
    if g.coin(0.4):
        a["output_datatype"] = tp(g.choice([np.float32, np.float64, np.float16, np.int32]))
    n = g.ri(1, 12)
    g.out(g.node(g.op, [g.const(np.array(n, g.choice([np.int64, np.int32])), p_input=0.3)], **a))


@gen("DFT", tol="acc")
def g_dft(g):
    dt = g.types("T1", only=(np.float32, np.float64))
    B, n = g.ri(1, 3), g.ri(1, 12)
    comp = g.ri(1, 2)
    inverse = g.ri(0, 1) if g.coin(0.5) else 0
    onesided = g.ri(0, 1) if g.coin(0.4) else 0
    if onesided and inverse:
        comp = 2
    if onesided and not inverse:
        comp = 1
    a = {}
    if inverse:
        a["inverse"] = 1
    if onesided:
        a["onesided"] = 1
    ins = [g.input(g.data([B, n, comp], dt, special=False))]
    if g.coin(0.3):
        ins.append(g.const(np.array(g.ri(1, 14), np.int64)))
    g.out(g.node("DFT", ins, **a))


@gen("STFT", tol="acc")
def g_stft(g):
    dt = g.types("T1", only=(np.float32, np.float64))
    B, L = g.ri(1, 2), g.ri(4, 24)
    fl = g.ri(2, min(L, 8))
    step = g.ri(1, fl)
    ins = [g.input(g.data([B, L, 1], dt, special=False)), g.const(np.array(step, np.int64))]
    w = g.coin(0.5)
    ins.append(g.const(g.data([fl], dt, 0, 1, special=False)) if w else "")
    if not w or g.coin(0.5):
        ins.append(g.const(np.array(fl, np.int64)))
    while ins[-1] == "":
        ins.pop()
    a = {"onesided": g.ri(0, 1)} if g.coin(0.5) else {}
    g.out(g.node("STFT", ins, **a))


@gen("MelWeightMatrix", tol="acc")
def g_mel(g):
    nmel, dftlen = g.ri(1, 5), g.choice([8, 16, 10, 32])
    sr, lo, hi = g.choice([8000, 16000]), g.choice([0.0, 100.0]), g.choice([3000.0, 4000.0])
    it = g.choice([np.int64, np.int32])
    ins = [g.const(np.array(v, it)) for v in (nmel, dftlen, sr)] + \
          [g.const(np.array(lo, np.float32)), g.const(np.array(hi, np.float32))]
    g.out(g.node("MelWeightMatrix", ins))


@gen("Constant", tol="exact")
def g_constant(g):
    form = g.choice(["value", "value", "value_float", "value_floats", "value_int", "value_ints"]) \
        if g.since() >= 12 else "value"
    x = g.data(g.shape(0, 2), np.float32)
    if form == "value":
        c = g.data(g.bshapes(list(x.shape), 1)[0], np.float32)
        a = {"value": numpy_helper.from_array(c, "v")}
    elif form == "value_float":
        a = {"value_float": 2.5}
    elif form == "value_floats":
        a = {"value_floats": [1.0, -2.0, 3.5][:g.ri(1, 3)]}
    elif form == "value_int":
        a = {"value_int": 3}
    else:
        a = {"value_ints": [1, 2, -3][:g.ri(1, 3)]}
    c = g.node("Constant", [], **a)
    if form in ("value_floats", "value_ints") and x.ndim == 0:
        raise Reject("1-d constant")
    if form in ("value_floats", "value_ints") and x.shape[-1] not in (1, len(a[form])):
        raise Reject("constant does not broadcast")
    if form in ("value_int", "value_ints"):
        g.out(c)
        g.out(g.node("Add", [g.input(x), g.node("Cast", [c], to=TensorProto.FLOAT)]))
    else:
        g.out(g.node("Add", [g.input(x), c]))


@gen("TfIdfVectorizer", tol="ew")
def g_tfidf(g):
    it = g.choice([np.int64, np.int32])
    s = [g.ri(4, 12)] if g.coin(0.5) else [g.ri(1, 3), g.ri(4, 12)]
    x = g.data(s, it, 0, 5, special=False)
    uni = sorted(int(v) for v in g.rng.choice(6, g.ri(1, 4), replace=False))
    bi = [[g.ri(0, 5), g.ri(0, 5)] for _ in range(g.ri(0, 3))]
    pool = uni + [v for p in bi for v in p]
    ncounts = [0, len(uni)] if bi else [0]
    nidx = list(range(len(uni) + len(bi)))
    g.rng.shuffle(nidx)
    a = {"mode": g.choice(["TF", "IDF", "TFIDF"]), "min_gram_length": 1 if g.coin(0.7) else (2 if bi else 1),
         "max_gram_length": 2 if bi else 1, "max_skip_count": g.ri(0, 2), "ngram_counts": ncounts,
         "ngram_indexes": [int(v) for v in nidx], "pool_int64s": pool}
    if g.coin(0.4):
        a["weights"] = [float(v) for v in g.rng.uniform(0.5, 2, len(nidx))]
    g.out(g.node("TfIdfVectorizer", [g.input(x)], **a))


# ---- multi-node graphs aimed at kiln's fusion and view machinery

EW_UNARY = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Erf",
            "Softplus", "LeakyRelu", "Elu", "HardSigmoid", "Softsign", "Sin", "Cos", "Round", "Sign"]
EW_BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"]


@gen("EwChain", tol="ew")
def g_ewchain(g):
    """A random DAG of 2..6 elementwise nodes over broadcast inputs (fused groups on cpu/opencl)."""
    dt = np.float32 if g.coin(0.8) else g.choice([np.float64, np.float16])
    if dt == np.float16 and g.opset < 13:
        dt = np.float32
    big = g.coin(0.2)
    out = g.shape(1, 4, cap=40000 if big else 3000)
    if big:
        out[-1] = max(out[-1], g.ri(9, 67))
    vals = []
    for s in g.bshapes(out, g.ri(1, 3)):
        vals.append(g.input(g.data(s, dt)) if g.coin(0.7) else g.const(g.data(s, dt)))
    if not any(True for _ in vals):
        raise Reject("no input")
    ops_used = []
    for _ in range(g.ri(2, 6)):
        if g.coin(0.5):
            op = g.choice(EW_UNARY + (["HardSwish"] if g.opset >= 14 else []))
            x = g.choice(vals)
            if op in ("Log", "Sqrt") and g.coin(0.7):
                x = g.node("Abs", [x])
            if op == "Exp" and g.coin(0.7):
                x = g.node("Tanh", [x])
            y = g.node(op, [x])
        else:
            op = g.choice(EW_BINARY)
            a_, b_ = g.choice(vals), g.choice(vals)
            if g.coin(0.3):
                b_ = g.const(g.data(g.bshapes(out, 1)[0], dt))
            if op == "PRelu":  # the slope broadcasts one way, to X
                _, xs = g.inferred(a_)
                if xs is None:
                    raise Reject("PRelu X shape unknown")
                ss = [] if not xs or g.coin(0.3) else ([xs[-1]] if g.coin(0.5) else [1])
                b_ = g.const(g.data(ss, dt, -1, 1))
            if op == "Pow":
                a_ = g.node("Abs", [a_])
                b_ = g.const(np.array(g.choice([2.0, 0.5, 3.0, -1.0, 1.5]), dt))
            y = g.node(op, [a_, b_])
        ops_used.append(op)
        vals.append(y)
    if g.coin(0.2):  # CSE bait: the same node twice
        a_ = vals[-1]
        vals.append(g.node("Add", [g.node("Relu", [a_]), g.node("Relu", [a_])]))
        ops_used.append("Relu+Relu(dup)")
    if g.coin(0.2) and len(vals) >= 2:  # producers written straight into a Concat's slices
        r_ = len(out)
        ax = g.ri(0, r_ - 1)
        a_ = g.node("Expand", [vals[-1], g.const(np.array(out, np.int64))])
        b_ = g.node("Sigmoid", [g.node("Expand", [vals[-2], g.const(np.array(out, np.int64))])])
        vals.append(g.node("Concat", [a_, b_] if g.coin(0.5) else [b_, a_], axis=ax))
        ops_used.append(f"Concat(axis={ax})")
    if g.coin(0.15):  # a constant-only subgraph (folded at init)
        c1 = g.const(g.data(g.bshapes(out, 1)[0], dt, special=False))
        c2 = g.const(g.data(g.bshapes(out, 1)[0], dt, special=False))
        vals.append(g.node("Add", [vals[-1], g.node("Mul", [g.node("Tanh", [c1]), c2])]))
        ops_used.append("const-subgraph")
    g.desc["ops"] = ops_used
    g.out(vals[-1])
    if g.coin(0.3) and len(vals) > 2 and vals[-2] in [n.output[0] for n in g.nodes]:
        g.out(vals[-2])  # an intermediate that is also a graph output


@gen("ViewChain", tol="exact")
def g_viewchain(g):
    """2..5 view ops (Transpose, Reshape, Slice, Squeeze/Unsqueeze, Expand, Flatten, Split, Gather with a scalar,
    Concat) read by an elementwise op or a reduction: kiln's cpu backend runs views as strided aliases."""
    if g.opset < 13:
        raise Reject("ViewChain uses opset 13 forms")
    dt = np.float32 if g.coin(0.8) else g.choice([np.int64, np.float16, np.int8])
    shape = g.shape(2, 4, cap=4000)
    if g.coin(0.15):  # views of a constant graph output (kept as views at 64 KiB and up)
        shape = [g.ri(16, 40), g.ri(16, 40), g.ri(17, 30)]
        x = g.const(g.data(shape, dt))
        g.desc["const_base"] = shape
    else:
        x = g.input(g.data(shape, dt))
    cur, sh = x, list(shape)
    used = []
    for _ in range(g.ri(2, 5)):
        r = len(sh)
        k = g.choice(["Transpose", "Reshape", "Slice", "Unsqueeze", "Squeeze", "Expand", "Flatten", "Split",
                      "Gather", "Concat"])
        if k == "Transpose" and r >= 2:
            perm = [int(v) for v in g.rng.permutation(r)]
            cur, sh = g.node("Transpose", [cur], perm=perm), [sh[p] for p in perm]
        elif k == "Reshape" and r >= 1:
            n = int(np.prod(sh))
            divs = [d for d in range(1, n + 1) if n % d == 0]
            a_ = g.choice(divs)
            new = [a_, n // a_] if g.coin(0.6) else [n]
            if g.coin(0.3):
                new = [1] + new
            spec = list(new)
            if g.coin(0.4):
                spec[g.ri(0, len(spec) - 1)] = -1
            cur, sh = g.node("Reshape", [cur, g.const(np.array(spec, np.int64))]), new
        elif k == "Slice" and r >= 1:
            ax = g.ri(0, r - 1)
            d = sh[ax]
            if g.coin(0.4) and d > 1:
                st, en, sp = d - 1, -d - 1, -g.ri(1, 2)
                ln = len(range(d - 1, -1, sp))
            else:
                st = g.ri(0, d - 1)
                en = g.ri(st + 1, d)
                sp = g.ri(1, 2)
                ln = len(range(st, en, sp))
            cur = g.node("Slice", [cur, g.const(np.array([st], np.int64)), g.const(np.array([en], np.int64)),
                                   g.const(np.array([ax], np.int64)), g.const(np.array([sp], np.int64))])
            sh = list(sh)
            sh[ax] = ln
        elif k == "Unsqueeze":
            ax = g.ri(0, r)
            cur = g.node("Unsqueeze", [cur, g.const(np.array([ax], np.int64))])
            sh = sh[:ax] + [1] + sh[ax:]
        elif k == "Squeeze" and 1 in sh and r > 1:
            ax = sh.index(1)
            cur = g.node("Squeeze", [cur, g.const(np.array([ax], np.int64))])
            sh = sh[:ax] + sh[ax + 1:]
        elif k == "Expand" and 1 in sh:
            new = [d if d != 1 or g.coin(0.5) else g.ri(2, 4) for d in sh]
            cur, sh = g.node("Expand", [cur, g.const(np.array(new, np.int64))]), new
        elif k == "Flatten" and r >= 1:
            ax = g.ri(0, r)
            cur = g.node("Flatten", [cur], axis=ax)
            sh = [int(np.prod(sh[:ax])), int(np.prod(sh[ax:]))]
        elif k == "Split" and r >= 1 and max(sh) >= 2:
            ax = int(np.argmax(sh))
            d = sh[ax]
            c = g.ri(1, d - 1)
            outs = g.node("Split", [cur, g.const(np.array([c, d - c], np.int64))], nout=2, axis=ax)
            pick = g.ri(0, 1)
            cur = outs[pick]
            sh = list(sh)
            sh[ax] = c if pick == 0 else d - c
        elif k == "Gather" and r >= 2:
            ax = g.ri(0, r - 1)
            i = g.ri(-sh[ax], sh[ax] - 1)
            cur = g.node("Gather", [cur, g.const(np.array(i, np.int64))], axis=ax)
            sh = sh[:ax] + sh[ax + 1:]
        elif k == "Concat" and r >= 1:
            ax = g.ri(0, r - 1)
            other = g.data(sh, dt)
            cur = g.node("Concat", [cur, g.const(other)] if g.coin(0.5) else [g.const(other), cur], axis=ax)
            sh = list(sh)
            sh[ax] *= 2
        else:
            continue
        used.append(k)
        if int(np.prod(sh)) > 60000:
            raise Reject("too big")
    if not used:
        raise Reject("no view")
    g.desc["views"] = used
    end = g.choice(["Add", "Mul", "Relu", "Neg", "ReduceSum", "none", "Sigmoid"])
    if dt != np.float32 and end in ("Sigmoid",):
        end = "Neg"
    if end in ("Add", "Mul"):
        cur = g.node(end, [cur, g.const(g.data(g.bshapes(sh, 1)[0] if sh else [], dt))])
    elif end in ("Relu", "Neg", "Sigmoid"):
        if end == "Relu" and dt == np.int8:
            end = "Neg"
        cur = g.node(end, [cur])
        if end == "Sigmoid":
            g.tol = "ew"
    elif end == "ReduceSum" and sh:
        cur = g.node("ReduceSum", [cur, g.const(np.array([g.ri(0, len(sh) - 1)], np.int64))], keepdims=g.ri(0, 1))
        g.tol = "acc"
    g.out(cur)




@gen("EmbBag", tol="acc")
def g_embbag(g):
    """Gather -> Mul by a [B,L,1] mask -> ReduceSum over the bag axis: kiln's cpu backend rewrites it into
    its SparseLengthsWeightedSum."""
    if g.opset < 11:
        raise Reject("negative indices need opset 11")
    V, D, B, L = g.ri(1, 30), g.ri(1, 40), g.ri(1, 6), g.ri(1, 8)
    dt = np.float32 if g.coin(0.8) else g.choice([np.float16, np.float64])
    table = g.data([V, D], dt, special=False)
    idx = _indices(g, V, [B, L], True, g.choice([np.int64, np.int32]))
    t = g.const(table) if g.coin(0.7) else g.input(table)
    i = g.input(idx)
    emb = g.node("Gather", [t, i], axis=0)
    form = g.choice(["mask", "mask", "nomask", "mean"])
    if form != "nomask":
        m = g.data([B, L, 1], dt, 0, 1, special=False) if g.coin(0.5) else \
            (g.rng.random([B, L, 1]) < 0.7).astype(dt)
        emb = g.node("Mul", [emb, g.input(m)] if g.coin(0.7) else [g.input(m), emb])
    kd = g.ri(0, 1)
    op = "ReduceMean" if form == "mean" else "ReduceSum"
    if op == "ReduceSum" and g.opset >= 13:
        y = g.node(op, [emb, g.const(np.array([1], np.int64))], keepdims=kd)
    else:
        y = g.node(op, [emb], axes=[1], keepdims=kd)
    g.desc.update(form=form, V=V, D=D, B=B, L=L)
    g.out(y)


@gen("ConvBN", tol="acc")
def g_convbn(g):
    """Conv or Gemm followed by BatchNormalization (folded into the weights on cpu), maybe a Relu."""
    dt = np.float32
    C, M = g.ri(1, 8), g.ri(1, 8)
    if g.coin(0.6):
        k = g.ri(1, 3)
        x = g.input(g.data([g.ri(1, 2), C, g.ri(k, k + 8), g.ri(k, k + 8)], dt))
        ins = [x, g.const(g.data([M, C, k, k], dt, scale=0.3, special=False))]
        if g.coin(0.6):
            ins.append(g.const(g.data([M], dt)))
        a = {"pads": [k // 2] * 4} if g.coin(0.5) else {}
        y = g.node("Conv", ins, **a)
        head = "Conv"
    else:
        x = g.input(g.data([g.ri(1, 6), C], dt))
        ins = [x, g.const(g.data([C, M], dt, special=False))]
        if g.coin(0.6) or g.opset < 11:
            ins.append(g.const(g.data([M], dt, special=False)))
        y = g.node("Gemm", ins)
        head = "Gemm"
    bn = [g.const(g.data([M], dt, special=False)), g.const(g.data([M], dt, special=False)),
          g.const(g.data([M], dt, special=False)), g.const(g.data([M], dt, 0.1, 2.0, special=False))]
    y = g.node("BatchNormalization", [y] + bn, epsilon=g.choice([1e-5, 1e-3]))
    if g.coin(0.5):
        y = g.node("Relu", [y])
    g.desc["head"] = head
    g.out(y)


# ============================================================ chains

CHAIN_HEADS = ["Conv", "MatMul", "Gemm", "Add", "Mul", "Sub", "Softmax", "Transpose", "ReduceMean", "ReduceSum",
               "Slice", "Concat", "MaxPool", "AveragePool", "BatchNormalization", "LayerNormalization", "Gather",
               "Sigmoid", "Relu", "Reshape", "Expand", "Pad", "Resize", "Where", "GlobalAveragePool", "Split",
               "Tanh", "Div", "InstanceNormalization", "Clip", "Cast", "ConvTranspose", "Tile", "Flatten",
               "Unsqueeze", "Squeeze", "CumSum", "Erf", "Pow", "DepthToSpace"]


def _postfix(g, y, dt, shape):
    """Append one node consuming y; -> (name, dtype, shape-or-None, opname)."""
    r = len(shape)
    kinds = ["unary"] * 4 + ["binary"] * 3 + ["swish", "transpose", "reshape", "reduce", "softmax", "slice",
                                                 "concat", "castrt", "clip"]
    k = g.choice(kinds)
    if k == "unary":
        op = g.choice(["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp", "LeakyRelu", "Erf", "Softplus", "HardSigmoid",
                       "Sqrt", "Floor", "Elu"] + (["HardSwish"] if g.opset >= 14 else []))
        if op == "Exp":
            y = g.node("Tanh", [y])
        if op == "Sqrt":
            y = g.node("Abs", [y])
        return g.node(op, [y]), dt, shape, op
    if k == "binary":
        op = g.choice(["Add", "Mul", "Sub", "Div", "Max", "Min"])
        os_ = g.bshapes(shape, 1)[0] if shape else []
        if op in ("Max", "Min") and g.opset < 8:
            os_ = list(shape)
        c = g.data(os_, dt, 0.5, 2.0) if op == "Div" else g.data(os_, dt)
        other = g.const(c, p_input=0.4)
        ins = [other, y] if g.coin(0.3) else [y, other]
        return g.node(op, ins), dt, shape, op
    if k == "swish":
        return g.node("Mul", [y, g.node("Sigmoid", [y])]), dt, shape, "Mul(Sigmoid)"
    if k == "transpose" and r >= 2:
        perm = [int(v) for v in g.rng.permutation(r)]
        return g.node("Transpose", [y], perm=perm), dt, [shape[p] for p in perm], "Transpose"
    if k == "reshape" and r >= 1:
        spec = [-1] if g.coin(0.5) else [shape[0], -1]
        n = int(np.prod(shape))
        out = [n] if spec == [-1] else [shape[0], n // shape[0]]
        return g.node("Reshape", [y, g.const(np.array(spec, np.int64))]), dt, out, "Reshape"
    if k == "reduce" and r >= 1:
        op = g.choice(["ReduceMean", "ReduceSum", "ReduceMax"])
        ax = g.axis(r, neg_ok=g.opset >= 11)
        kd = g.ri(0, 1)
        if op == "ReduceSum" and g.opset >= 13:
            z = g.node(op, [y, g.const(np.array([ax], np.int64))], keepdims=kd)
        else:
            z = g.node(op, [y], axes=[ax], keepdims=kd)
        out = list(shape)
        if kd:
            out[ax] = 1
        else:
            del out[ax]
        return z, dt, out, op
    if k == "softmax" and r >= 1:
        op = g.choice(["Softmax", "LogSoftmax"])
        return g.node(op, [y], axis=(-1 if g.opset >= 11 else r - 1)), dt, shape, op
    if k == "slice" and r >= 1 and g.opset >= 10:
        ax = g.ri(0, r - 1)
        d = shape[ax]
        st = g.ri(0, d - 1)
        z = g.node("Slice", [y, g.const(np.array([st], np.int64)), g.const(np.array([d], np.int64)),
                             g.const(np.array([ax], np.int64))])
        out = list(shape)
        out[ax] = d - st
        return z, dt, out, "Slice"
    if k == "concat" and r >= 1:
        ax = g.ri(0, r - 1)
        out = list(shape)
        out[ax] *= 2
        return g.node("Concat", [y, y], axis=ax), dt, out, "Concat"
    if k == "castrt" and dt == np.float32:
        to = g.choice([np.float64, np.float16])
        z = g.node("Cast", [y], to=tp(to))
        return g.node("Cast", [z], to=TensorProto.FLOAT), dt, shape, f"Cast({np.dtype(to).name})"
    if k == "clip":
        if g.opset >= 11:
            z = g.node("Clip", [y, g.const(np.array(-1.0, dt)), g.const(np.array(1.5, dt))])
        else:
            z = g.node("Clip", [y], min=-1.0, max=1.5)
        return z, dt, shape, "Clip"
    return g.node("Relu", [y]), dt, shape, "Relu"


def add_chain(g):
    if not g.outputs:
        raise Reject("no output")
    y = g.outputs[0]
    dt, shape = g.inferred(y)
    if dt is None or shape is None or np.dtype(dt) not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise Reject("chain head not float with a known shape")
    steps = []
    del g.outputs[0]
    for _ in range(g.ri(1, 2)):
        y, dt, shape, name = _postfix(g, y, np.dtype(dt).type, shape)
        steps.append(name)
        if shape is None:
            break
    g.outputs.insert(0, y)
    g.chain = steps
    if g.unordered:
        g.unordered = None


# ============================================================ comparison

# (rtol, atol, atol scaled by max |expected|)
TOLS = {
    "exact": {"f32": (0, 0, False), "f64": (0, 0, False), "f16": (0, 0, False)},
    "ew": {"f32": (1e-5, 1e-6, False), "f64": (1e-9, 1e-12, False), "f16": (2e-3, 1e-4, False)},
    "acc": {"f32": (1e-4, 5e-5, True), "f64": (1e-8, 1e-10, True), "f16": (1e-2, 2e-3, True)},
    "bf16": {"f32": (0, 0, False), "f64": (0, 0, False), "f16": (0, 0, False)},
}
TRIG = {"Sin", "Cos", "Tan"}


def tol_for(cls, dt):
    key = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16"}.get(np.dtype(dt),
                                                                                                       "f32")
    return TOLS.get(cls, TOLS["acc"])[key]


def compare(exp, got, cls, in_absmax=1.0, op=None, loose64=False):
    """-> (ok, detail dict)"""
    exp, got = np.asarray(exp), np.asarray(got)
    if exp.shape != got.shape:
        return False, {"why": "shape", "expected_shape": list(exp.shape), "got_shape": list(got.shape)}
    if exp.dtype != got.dtype:
        return False, {"why": "dtype", "expected": str(exp.dtype), "got": str(got.dtype)}
    if exp.dtype.kind in "biu":
        if cls in ("q1", "dynq") and exp.dtype.kind in "iu":
            d = np.abs(exp.astype(np.int64) - got.astype(np.int64))
            bad = d > 1
        else:
            bad = exp != got
        if not bad.any():
            return True, {}
        i = np.argwhere(bad)[0]
        return False, {"why": "values", "n_bad": int(bad.sum()), "at": [int(v) for v in i],
                       "expected": exp[tuple(i)].item(), "got": got[tuple(i)].item()}
    e64, g64 = exp.astype(np.float64), got.astype(np.float64)
    en, gn = np.isnan(e64), np.isnan(g64)
    bad = en != gn
    fin = ~en & ~gn
    if loose64 and exp.dtype == np.float64 and cls in ("exact", "bf16", "ew"):
        cls = "ew" if cls != "ew" else "acc"  # an oracle that computed in float32 (or the evaluator's float32 constants)
    rtol, atol, scaled = tol_for(cls if cls not in ("q1", "dynq") else "ew",
                                 np.float32 if loose64 and exp.dtype == np.float64 else exp.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        ef = np.isfinite(e64)
        scale = 1.0
        if scaled and np.any(ef):
            scale = max(1.0, float(np.max(np.abs(e64[ef]))))
        if op in TRIG:
            atol = max(atol, 4e-7 * max(1.0, in_absmax)) if exp.dtype == np.float32 else atol
        inf_e = fin & ~ef
        bad |= inf_e & (e64 != g64)
        inf_g = fin & ef & ~np.isfinite(g64)
        bad |= inf_g
        m = fin & ef & np.isfinite(g64)
        diff = np.abs(e64 - g64)
        bad |= m & (diff > atol * scale + rtol * np.abs(e64))
    if not bad.any():
        return True, {}
    i = np.argwhere(bad)[0]
    with np.errstate(invalid="ignore"):
        md = float(np.nanmax(np.where(m, diff, 0))) if m.any() else 0.0
    return False, {"why": "values", "n_bad": int(bad.sum()), "of": int(exp.size), "at": [int(v) for v in i],
                   "expected": float(e64[tuple(i)]), "got": float(g64[tuple(i)]), "max_abs_diff": md,
                   "rtol": rtol, "atol": atol * scale}


def canon_unordered(outs, names, unordered):
    """TopK sorted=0: order the k results by index along the axis."""
    if not unordered:
        return outs
    v, i, axis = unordered
    if v not in names or i not in names:
        return outs
    iv, ii = names.index(v), names.index(i)
    outs = list(outs)
    order = np.argsort(outs[ii], axis=axis, kind="stable")
    outs[iv] = np.take_along_axis(outs[iv], order, axis=axis)
    outs[ii] = np.take_along_axis(outs[ii], order, axis=axis)
    return outs


def compare_all(exp, got, names, g_info):
    res = []
    exp = canon_unordered(exp, names, g_info["unordered"])
    got = canon_unordered(got, names, g_info["unordered"])
    for n, e, k in zip(names, exp, got):
        m = g_info.get("mask", {}).get(n)
        if m is not None and e.shape == m.shape == k.shape:
            e, k = e.copy(), k.copy()
            e[m] = 0
            k[m] = 0
        ok, d = compare(e, k, g_info["tol"], g_info["in_absmax"], g_info["op"], g_info.get("loose64"))
        if not ok:
            d["output"] = n
            res.append(d)
    return res


def run_reference_evaluator(model, feeds):
    from onnx.reference import ReferenceEvaluator
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            sess = ReferenceEvaluator(model)
            outs = sess.run(None, feeds)
    return [_c(np.asarray(o)) for o in outs]


# ============================================================ the driver

PSEUDO_OPS = {"EwChain": list(range(9, 18)), "ViewChain": list(range(13, 18)), "EmbBag": list(range(11, 18)),
              "ConvBN": list(range(9, 18))}


def op_opsets(op):
    if op in PSEUDO_OPS:
        return PSEUDO_OPS[op]
    return [v for v in range(7, 18) if op_exists(op, v)]


def make_case(seed, idx, ops, chain_p):
    rng = np.random.default_rng([seed, idx])
    op = ops[int(rng.integers(0, len(ops)))]
    chain = op in CHAIN_HEADS and rng.random() < chain_p
    vers = op_opsets(op)
    opset = int(vers[int(rng.integers(0, len(vers)))])
    fn, tol = GENS[op]
    invalid = []
    for attempt in range(30):
        g = G(rng, opset, op)
        try:
            fn(g)
            if chain:
                add_chain(g)
            model = g.model()
        except Reject:
            continue
        except Exception as e:  # noqa: BLE001 (checker / inference: the generator made an invalid model)
            invalid.append(f"{type(e).__name__}: {str(e)[:300]}")
            continue
        g.tol = g.tol or tol
        if g.chain and g.tol == "exact":
            g.tol = "ew"
        return g, model, invalid
    return None, None, invalid


def alt_float32(model):
    """The same graph computed in float32 where it holds float64/float16 values: initializers
    converted, inputs and outputs cast; None where a node's attributes depend on the type."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    wide = (TensorProto.DOUBLE, TensorProto.FLOAT16)
    for n in g.node:
        for a in n.attribute:
            if a.name in ("to", "value", "output_datatype", "dtype") or a.type == onnx.AttributeProto.TENSOR:
                return None
        if n.op_type in ("CastLike",):
            return None
    changed = False
    for t in g.initializer:
        if t.data_type in wide:
            a = numpy_helper.to_array(t).astype(np.float32)
            t.CopyFrom(numpy_helper.from_array(a, t.name))
            changed = True
    pre, post = [], []
    ren = {}
    for v in g.input:
        if v.type.tensor_type.elem_type in wide:
            nn = v.name + "__f32"
            pre.append(helper.make_node("Cast", [v.name], [nn], to=TensorProto.FLOAT))
            ren[v.name] = nn
            changed = True
    for n in g.node:
        for i, x in enumerate(n.input):
            if x in ren:
                n.input[i] = ren[x]
    for v in g.output:
        et = v.type.tensor_type.elem_type
        if et in wide:
            nn = v.name + "__f32"
            for n in g.node:
                for i, x in enumerate(n.output):
                    if x == v.name:
                        n.output[i] = nn
                for i, x in enumerate(n.input):
                    if x == v.name:
                        n.input[i] = nn
            post.append(helper.make_node("Cast", [nn], [v.name], to=et))
            changed = True
    if not changed:
        return None
    nodes = pre + list(g.node) + post
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    return m


def out_types(model):
    return [helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type) for o in model.graph.output]


def in_absmax(feeds):
    m = 1.0
    for a in feeds.values():
        if a.dtype.kind == "f" and a.size:
            f = np.abs(a[np.isfinite(a)].astype(np.float64))
            if f.size:
                m = max(m, float(f.max()))
    return m


# ops whose one input may take other sizes on the same graph (symbolic dims, the second feed set)
RESIZE_OK_OPS = set(UNARY_DOMAIN) | {
    "Abs", "Neg", "Floor", "Ceil", "Relu", "Sign", "Round", "Not", "IsNaN", "Identity", "Sigmoid", "Tanh", "Softplus",
    "Softsign", "Erf", "HardSwish", "Sin", "Cos", "Atan", "Asinh", "LeakyRelu", "Elu", "Selu", "HardSigmoid",
    "ThresholdedRelu", "Celu", "Shrink", "IsInf", "Softmax", "LogSoftmax", "Hardmax", "ArgMax", "ArgMin",
    "Flatten", "Transpose", "Cast", "Shape", "Size", "NonZero", "CumSum", "LpNormalization", "Concat",
    "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "Trilu", "EwChain", "Dropout", "Clip"} | set(REDUCE_OPS)


def input_flags(feeds, inits=()):
    f = set()
    for a in list(feeds.values()) + [numpy_helper.to_array(t) for t in inits]:
        if a.dtype.kind == "f" and a.size:
            if np.isnan(a).any():
                f.add("nan")
            if np.isinf(a).any():
                f.add("inf")
            with np.errstate(invalid="ignore"):
                if (np.abs(a[np.isfinite(a)].astype(np.float64)) > 1e15).any():
                    f.add("huge")
    return ",".join(sorted(f))


def case_label(g):
    s = g.op
    if g.chain:
        s += "+" + "+".join(g.chain)
    return s


def jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, float) and not np.isfinite(v):
        return str(v)
    return v


def save_repro(d, model, feeds, names, expected, oracle, kiln_outs, info):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    np.savez(os.path.join(d, "inputs.npz"), **feeds)
    if expected is not None:
        np.savez(os.path.join(d, f"expected_{oracle}.npz"), **dict(zip(names, expected)))
    if kiln_outs is not None:
        np.savez(os.path.join(d, "kiln.npz"), **dict(zip(names, kiln_outs)))
    with open(os.path.join(d, "info.json"), "w") as f:
        json.dump(jsonable(info), f, indent=1, default=str)


def norm_msg(m):
    import re
    m = re.sub(r"'[^']*'", "'_'", m or "")
    m = re.sub(r"\b(node|value) \S+", r"\1 _", m)
    m = re.sub(r"-?\d+", "N", m)
    return m[:160]


class Runner:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        os.makedirs(self.out, exist_ok=True)
        self.log = open(os.path.join(self.out, "log.jsonl"), "a")
        env_common = {}
        if args.cl_cache:
            env_common["KILN_CACHE_DIR"] = args.cl_cache
        self.ort = Worker("ort", "ort", {}, args.lib, self.out, args.timeout)
        self.kiln = []
        for spec in args.backends.split(","):
            name, _, every = spec.partition(":")
            if name not in BACKENDS:
                sys.exit(f"unknown backend {name} (have {', '.join(BACKENDS)})")
            env = dict(BACKENDS[name], **env_common)
            if name.startswith("opencl") and args.cl_cache is None:
                env["KILN_CACHE_DIR"] = os.path.join(self.out, "clcache")
            self.kiln.append((name, int(every or 1), Worker(name, "kiln", env, args.lib, self.out, args.timeout)))
        self.counts = {}
        self.groups = {}
        self.saved = {}

    def bump(self, backend, key):
        c = self.counts.setdefault(backend, {})
        c[key] = c.get(key, 0) + 1

    def finding(self, key, backend, rec, save):
        gk = (backend,) + key
        grp = self.groups.setdefault(gk, {"count": 0, "cases": []})
        grp["count"] += 1
        if len(grp["cases"]) < 8:
            grp["cases"].append(rec["case"])
        n = self.saved.get(gk, 0)
        if n < self.args.save_per_group:
            self.saved[gk] = n + 1
            save()

    def run_case(self, idx, ops):
        args = self.args
        t0 = time.monotonic()
        g, model, invalid = make_case(args.seed, idx, ops, args.chains)
        for msg in invalid:
            self.bump("gen", "invalid_draws")
            if args.verbose:
                print(f"  case {idx}: invalid draw: {msg}")
            self.log.write(json.dumps({"case": idx, "backend": "gen", "result": "invalid-draw", "msg": msg}) + "\n")
        if g is None:
            self.bump("gen", "no_case")
            return
        label = case_label(g)
        names = list(g.outputs)
        mbytes = model.SerializeToString()
        feeds = g.feeds
        types = out_types(model)
        base = {"case": idx, "seed": args.seed, "op": g.op, "label": label, "opset": g.opset,
                "attrs": g.desc, "inputs": {k: [list(v.shape), str(v.dtype)] for k, v in feeds.items()},
                "outputs": names, "flags": input_flags(feeds, g.inits)}
        # oracle
        oracle, expected, ort_err, ref_cache = None, None, None, {}
        r = self.ort.call((mbytes, feeds, names))
        alt = None
        if r[0] != "ok":
            alt = g.alt_model(model) if g.alt_model else alt_float32(model)
        if r[0] == "ok":
            oracle, expected = "ort", r[1]
        elif alt is not None and (r2 := self.ort.call((alt.SerializeToString(), feeds, names)))[0] == "ok":
            ort_err = r[1:] if r[0] == "err" else r
            oracle, expected = "ort-alt", [np.asarray(o).astype(t) for o, t in zip(r2[1], types)]
        elif g.np_oracle is not None:
            ort_err = r[1:] if r[0] == "err" else r
            oracle, expected = "numpy", [np.asarray(o).astype(t) for o, t in zip(g.np_oracle(feeds), types)]
        else:
            ort_err = r[1:] if r[0] == "err" else r
            try:
                expected = [np.asarray(o).astype(t) for o, t in zip(run_reference_evaluator(model, feeds), types)]
                oracle = "ref"
                ref_cache["outs"] = expected
            except Exception as e:  # noqa: BLE001
                ref_cache["err"] = f"{type(e).__name__}: {str(e)[:300]}"
        if expected is None:
            self.bump("oracle", "no_oracle")
            self.log.write(json.dumps(jsonable(dict(base, backend="oracle", result="no-oracle", ort_err=ort_err,
                                                    ref_err=ref_cache.get("err")))) + "\n")
            if args.verbose:
                print(f"case {idx} {label} opset {g.opset}: no oracle: ORT {ort_err}; ref {ref_cache.get('err')}")
            return
        if any(0 in e.shape for e in expected):
            self.bump("oracle", "zero_sized_output")
            return
        # onnx shape inference can be wrong (STFT's onesided default): a model must not
        # declare an output shape its own op contradicts, so name those dims instead
        sym_sizes = {}
        for v in model.graph.input:
            for d, n in zip(v.type.tensor_type.shape.dim, feeds[v.name].shape if v.name in feeds else ()):
                if d.dim_param:
                    sym_sizes[d.dim_param] = n
        for o, e in zip(model.graph.output, expected):
            dims = o.type.tensor_type.shape.dim
            if any(d.HasField("dim_value") and d.dim_value != v for d, v in zip(dims, e.shape)) or \
                    any(d.dim_param in sym_sizes and sym_sizes[d.dim_param] != v for d, v in zip(dims, e.shape)) or \
                    len(dims) != e.ndim:
                base["flags"] = (base["flags"] + ",onnx-shape-wrong").strip(",")
                del o.type.tensor_type.shape.dim[:]
                for i in range(e.ndim):
                    o.type.tensor_type.shape.dim.add().dim_param = f"{o.name}_r{i}"
                mbytes = model.SerializeToString()
        self.bump("oracle", oracle)
        ginfo = {"tol": g.tol, "loose64": oracle != "ort", "unordered": g.unordered, "in_absmax": in_absmax(feeds), "op": g.op,
                 "mask": {k: v for k, v in (g.mask_fn(feeds) if g.mask_fn else {}).items() if v is not None}}
        specs = [(n, e.shape, e.dtype) for n, e in zip(names, expected)]
        runs = [(feeds, specs)] * max(1, args.runs)
        # a second feed set: new values, and new sizes for symbolic dims, on the same graph
        feeds2, expected2, ref_cache2 = None, None, {}
        if args.refeed and g.np_oracle is None and oracle in ("ort", "ort-alt"):
            feeds2 = self.refeed(g, idx)
            if feeds2 is not None:
                mb2 = mbytes if oracle == "ort" else alt.SerializeToString()
                r2 = self.ort.call((mb2, feeds2, names))
                if r2[0] == "ok" and not any(0 in np.shape(o) for o in r2[1]):
                    expected2 = [np.asarray(o).astype(t) for o, t in zip(r2[1], types)]
                    runs.append((feeds2, [(n, e.shape, e.dtype) for n, e in zip(names, expected2)]))
                    self.bump("oracle", "second_feed_sets" + ("_new_params" if set(g.alt_params) & set(feeds2) else ""))
        for bname, every, w in self.kiln:
            if idx % every:
                continue
            rec = dict(base, backend=bname, oracle=oracle)
            if ort_err:
                rec["ort_err"] = ort_err
            res = w.call((mbytes, runs))
            kouts = None
            if res[0] == "ok":
                kouts = res[1][0]
                diffs = compare_all(expected, kouts, names, ginfo)
                rerun = []
                for k in range(1, max(1, args.runs)):
                    for n, a, b in zip(names, res[1][0], res[1][k]):
                        if a.tobytes() != b.tobytes():
                            rerun.append(n)
                use_feeds, use_expected, use_cache = feeds, expected, ref_cache
                if expected2 is not None:
                    m2 = {k: v for k, v in (g.mask_fn(feeds2) if g.mask_fn else {}).items() if v is not None}
                    d2 = compare_all(expected2, res[1][-1], names, dict(ginfo, mask=m2))
                    if d2 and not diffs:
                        rec["second_feeds"] = {k: [list(v.shape), str(v.dtype)] for k, v in feeds2.items()}
                        diffs = [dict(d, run="second feed set") for d in d2]
                        kouts = res[1][-1]
                        use_feeds, use_expected, use_cache = feeds2, expected2, ref_cache2
                if not diffs and not rerun:
                    rec["result"] = "ok"
                    self.bump(bname, "ok")
                    self.log.write(json.dumps(jsonable(rec)) + "\n")
                    continue
                if rerun and not diffs:
                    rec["result"] = "rerun-differs"
                    rec["outputs_differing"] = rerun
                    key = ("rerun-differs", g.op)
                else:
                    rec["result"] = "mismatch"
                    rec["diffs"] = diffs
                    if rerun:
                        rec["rerun_differs"] = rerun
                    # arbitration by the ONNX reference evaluator
                    verdict = {"ref": "ref-is-oracle", "numpy": "numpy-is-oracle", "ort-alt": "ort-alt-is-oracle"}.get(oracle)
                    if oracle == "ort":
                        if "outs" not in use_cache and "err" not in use_cache:
                            try:
                                use_cache["outs"] = [np.asarray(o).astype(t) for o, t in
                                                     zip(run_reference_evaluator(model, use_feeds), types)]
                            except Exception as e:  # noqa: BLE001
                                use_cache["err"] = f"{type(e).__name__}: {str(e)[:300]}"
                        if "outs" in use_cache:
                            kd = compare_all(use_cache["outs"], kouts, names, ginfo)
                            od = compare_all(use_cache["outs"], use_expected, names, ginfo)
                            verdict = {(True, False): "ref=kiln", (False, True): "ref=ort",
                                       (True, True): "ref=both?", (False, False): "ref=neither"}[(not kd, not od)]
                            if kd:
                                rec["diffs_vs_ref"] = kd
                        else:
                            verdict = "ref-error"
                            rec["ref_err"] = use_cache["err"]
                    rec["verdict"] = verdict
                    key = ("mismatch", g.op, verdict, base["flags"])
            elif res[0] == "err":
                _, call, status, msg = res
                rec.update(result="refused", call=call, status=status, msg=msg)
                verdict = ""
                if status == "MISMATCHING_SHAPE" and oracle == "ort":
                    if "outs" not in ref_cache and "err" not in ref_cache:
                        try:
                            ref_cache["outs"] = [np.asarray(o).astype(t) for o, t in
                                                 zip(run_reference_evaluator(model, feeds), types)]
                        except Exception as e:  # noqa: BLE001
                            ref_cache["err"] = f"{type(e).__name__}: {str(e)[:300]}"
                    if "outs" in ref_cache:
                        rs = [list(o.shape) for o in ref_cache["outs"]]
                        rec["ref_shapes"] = rs
                        verdict = "ref-shape=ort" if rs == [list(e.shape) for e in expected] else "ref-shape!=ort"
                    else:
                        verdict = "ref-error"
                rec["verdict"] = verdict
                key = ("refused", g.op, status, norm_msg(msg), verdict)
            else:
                rec.update(result=res[0], msg=res[1])
                key = (res[0], g.op)
            self.bump(bname, rec["result"])
            self.log.write(json.dumps(jsonable(rec)) + "\n")
            d = os.path.join(self.out, "repro", f"{idx:06d}_{label.replace('(', '_').replace(')', '')}_{bname}")
            sf, se = (feeds2, expected2) if "second_feeds" in rec else (feeds, expected)
            if "second_feeds" in rec:
                rec["note"] = "the reproducer's inputs are the second feed set; the first run used other values"
            self.finding(key, bname, rec, lambda: save_repro(d, model, sf, names, se, oracle, kouts, rec))
            if args.verbose or res[0] in ("crash", "timeout"):
                print(f"case {idx} {label} opset {g.opset} [{bname}]: {rec['result']} "
                      f"{rec.get('verdict', '')} {rec.get('status', '')} {str(rec.get('msg', ''))[:200]} "
                      f"{json.dumps(jsonable(rec.get('diffs', '')))[:300]}", flush=True)
        self.log.flush()
        if args.verbose:
            print(f"case {idx} {label} opset {g.opset} oracle {oracle} {time.monotonic() - t0:.2f}s", flush=True)

    def refeed(self, g, idx):
        """New random values for the float inputs (same shapes), and for a single-input case with
        symbolic dims, new sizes for them; integer and bool inputs (indices, shapes) kept."""
        rng = np.random.default_rng([self.args.seed, idx, 2])
        sym_inputs = [v for v in g.inputs if any(d.dim_param for d in v.type.tensor_type.shape.dim)]
        resize = len(g.feeds) == 1 and len(sym_inputs) == 1 and g.op in RESIZE_OK_OPS and not g.chain and \
            rng.random() < 0.7
        out = {}
        for v in g.inputs:
            a = g.feeds[v.name]
            shape = list(a.shape)
            if resize and v in sym_inputs:
                for i, d in enumerate(v.type.tensor_type.shape.dim):
                    if d.dim_param:
                        shape[i] = int(rng.integers(1, shape[i] + 4))
                if int(np.prod(shape)) > 20000:
                    return None
            if v.name in g.alt_params:
                b = np.asarray(g.alt_params[v.name](rng))
            elif a.dtype.kind == "f":
                with np.errstate(over="ignore"):
                    b = (rng.standard_normal(shape) * (np.nanmax(np.abs(a[np.isfinite(a)])) if np.isfinite(a).any()
                                                        else 1.0)).astype(a.dtype)
            elif list(a.shape) == shape:
                b = a.copy()
            else:
                return None
            out[v.name] = _c(b)
        return out

    def summary(self):
        groups = sorted(self.groups.items(), key=lambda kv: (-kv[1]["count"], kv[0]))
        s = {"counts": self.counts,
             "findings": [{"key": list(k), "count": v["count"], "cases": v["cases"]} for k, v in groups]}
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(jsonable(s), f, indent=1)
        return s

    def close(self):
        self.ort.stop()
        for _, _, w in self.kiln:
            w.stop()
        self.log.close()


def replay(args):
    d = args.replay
    model = onnx.load(os.path.join(d, "model.onnx"))
    feeds = dict(np.load(os.path.join(d, "inputs.npz")))
    names = [o.name for o in model.graph.output]
    types = out_types(model)
    print(onnx.printer.to_text(model.graph))
    if args.verbose:
        for k, v in feeds.items():
            print(f"input {k} {v.dtype} {list(v.shape)}:\n{v}")
    mb = model.SerializeToString()
    ort_w = Worker("ort", "ort", {}, args.lib, "/tmp", args.timeout)
    r = ort_w.call((mb, feeds, names))
    ort_w.stop()
    results = {}
    if r[0] == "ok":
        results["onnxruntime"] = r[1]
    else:
        print("onnxruntime:", r)
    try:
        results["reference-evaluator"] = [np.asarray(o).astype(t) for o, t in
                                          zip(run_reference_evaluator(model, feeds), types)]
    except Exception as e:  # noqa: BLE001
        print("reference evaluator:", type(e).__name__, e)
    hand = os.path.join(d, "expected.npz")
    if os.path.exists(hand):
        z = np.load(hand)
        results["spec (expected.npz)"] = [z[n] for n in names]
    exp = results.get("spec (expected.npz)") or results.get("onnxruntime") or results.get("reference-evaluator")
    for spec in args.backends.split(","):
        name = spec.partition(":")[0]
        env = dict(BACKENDS[name])
        w = Worker(name, "kiln", env, args.lib, "/tmp", args.timeout)
        try:
            if exp is None:
                print(f"kiln {name}: no expected shapes")
                continue
            res = w.call((mb, [(feeds, [(n, e.shape, e.dtype) for n, e in zip(names, exp)])]))
        finally:
            w.stop()
        if res[0] == "ok":
            results[f"kiln-{name}"] = res[1][0]
        else:
            print(f"kiln {name}:", res)
    np.set_printoptions(precision=7, linewidth=160, threshold=200 if not args.verbose else 100000)
    if args.verbose:
        for who, outs in results.items():
            for n, o in zip(names, outs):
                print(f"--- {who} {n} {o.dtype} {list(o.shape)}:\n{o}")
    op = model.graph.node[0].op_type
    cls = args.tol or (GENS[op][1] if op in GENS else "acc")
    if len(model.graph.node) > 1 and cls == "exact":
        cls = "ew"
    ginfo = {"tol": cls, "unordered": None, "in_absmax": in_absmax(feeds), "op": op}
    whos = list(results)
    print(f"tolerance class {cls}")
    for i, a_ in enumerate(whos):
        for b_ in whos[i + 1:]:
            d = compare_all(results[a_], results[b_], names, ginfo)
            print(f"{a_} vs {b_}: {'agree' if not d else json.dumps(jsonable(d))}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--case", type=int, default=None, help="run only this case index")
    ap.add_argument("--ops", default="", help="comma list of ops (default: all)")
    ap.add_argument("--skip-ops", default="", help="comma list of ops to leave out")
    ap.add_argument("--backends", default="reference,cpu")
    ap.add_argument("--out", default="/tmp/diff_ort_out")
    ap.add_argument("--lib", default=DEFAULT_LIB)
    ap.add_argument("--chains", type=float, default=0.12, help="probability that a case is a 2-3 node chain")
    ap.add_argument("--runs", type=int, default=2, help="runs per graph (later runs must repeat the first)")
    ap.add_argument("--refeed", type=int, default=1, help="also run a second feed set (new values/sizes): 1/0")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--save-per-group", type=int, default=3, help="reproducers saved per distinct finding")
    ap.add_argument("--cl-cache", default=None, help="KILN_CACHE_DIR for opencl (default OUT/clcache)")
    ap.add_argument("--replay", default=None, help="directory with model.onnx and inputs.npz")
    ap.add_argument("--tol", default=None, help="replay: tolerance class (exact, ew, acc)")
    ap.add_argument("--list-ops", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker_main(*args.worker)
        return
    if args.list_ops:
        for op in sorted(GENS):
            print(op, op_opsets(op)[0] if op_opsets(op) else "-", GENS[op][1])
        return
    if args.replay:
        replay(args)
        return
    ops = sorted(GENS) if not args.ops else args.ops.split(",")
    skip = set(filter(None, args.skip_ops.split(",")))
    ops = [o for o in ops if o not in skip]
    for o in ops:
        if o not in GENS:
            sys.exit(f"no generator for {o}")
        if not op_opsets(o):
            sys.exit(f"{o} has no opset in 7..17")
    runner = Runner(args)
    idxs = [args.case] if args.case is not None else range(args.start, args.start + args.cases)
    t0 = time.monotonic()
    try:
        for n, idx in enumerate(idxs):
            try:
                runner.run_case(idx, ops)
            except KeyboardInterrupt:
                raise
            except Exception:  # noqa: BLE001  (a fuzzer bug: report, go on)
                runner.bump("harness", "error")
                print(f"case {idx}: harness error\n{traceback.format_exc()}", flush=True)
            if (n + 1) % 100 == 0:
                print(f"[{n + 1}/{len(idxs)}] {time.monotonic() - t0:.0f}s {json.dumps(runner.counts)}", flush=True)
    finally:
        s = runner.summary()
        runner.close()
    print(json.dumps(s["counts"], indent=1))
    for f in s["findings"][:60]:
        print(f["count"], f["key"], f["cases"][:4])


if __name__ == "__main__":
    main()
