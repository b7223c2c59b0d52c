#!/usr/bin/env python3
"""Generate the signal/text cases: DFT, STFT, MelWeightMatrix (opset 17) and
TfIdfVectorizer (opset 9) with the attributes and inputs the ONNX 1.12 node
tests leave out (one-sided forward and inverse DFT, dft_length cutting and
padding, complex input, axis 0 and negative axes, float64, a symbolic batch,
STFT on a complex signal / with window and frame_length / with neither,
MelWeightMatrix output types, TfIdfVectorizer IDF and TFIDF with weights, a
permuted ngram_indexes, a repeated pool n-gram, int64 tokens, 3-grams), and
GridSample (opset 16) on the integer and bool X its schema allows, in the
ONNX node-test layout for tests/conformance:

    test_<case>/model.onnx
    test_<case>/test_data_set_0/input_K.pb    seeded inputs
    test_<case>/test_data_set_0/output_K.pb   expected outputs

Expectations: numpy.fft in float64 for the transforms, and the operators'
definitions written out below for MelWeightMatrix and TfIdfVectorizer,
independent of kiln; GridSample's from the evaluator run on X in float64
(the schema: "intermediate values are computed as floating point and cast
to integer at the end"; the cast truncates toward zero) and, for nearest,
on X's flat indices, which then pick X's values exactly (int64 past 2^53);
onnxruntime on X in float32 (where that holds X exactly) must agree.
When the ONNX reference evaluator is importable
(onnx >= 1.13) each expectation is also checked against it; a TfIdfVectorizer
whose ngram_indexes is not the identity against onnxruntime instead (the
evaluator reads the weights by output coordinate, the operator's text and
onnxruntime by pool n-gram). Seeded: the
same files from run to run. Run with any python that has onnx and numpy:
    /work/main/build/bench/venv/bin/python tests/signal/make_signal.py
"""

import math
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

try:
    from onnx.reference import ReferenceEvaluator
except ImportError:  # onnx 1.12
    ReferenceEvaluator = None

HERE = os.path.dirname(os.path.abspath(__file__))
F32, F64, F16, I32, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64
NP = {F32: np.float32, F64: np.float64, F16: np.float16, I32: np.int32, I64: np.int64}


def write_case(case, node, ins, outs, inits=(), opset=17, check=True):
    """ins / outs: lists of (name, elem_type, shape or dims with names, value)."""
    graph = helper.make_graph(
        [node], case,
        [helper.make_tensor_value_info(n, t, s) for n, t, s, _ in ins],
        [helper.make_tensor_value_info(n, t, s) for n, t, s, _ in outs],
        initializer=[numpy_helper.from_array(v, name=n) for n, v in inits])
    model = helper.make_model(graph, producer_name="kiln tests/signal/make_signal.py", producer_version="1",
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    got = None
    if check == "ort":  # a second opinion from onnxruntime, where it is importable
        try:
            import onnxruntime as ort
            got = ort.InferenceSession(model.SerializeToString()).run(None, {n: v for n, _, _, v in ins})
        except ImportError:
            pass
    elif ReferenceEvaluator is not None and check:  # a second opinion on the expectation
        got = ReferenceEvaluator(model).run(None, {n: v for n, _, _, v in ins})
    if got is not None:
        for (n, t, _, want), g in zip(outs, got):
            tol = 1e-3 if t == F16 else 1e-4
            assert g.shape == want.shape, (case, n, g.shape, want.shape)
            assert np.allclose(g.astype(np.float64), want.astype(np.float64), rtol=tol, atol=1e-4), (case, n)
    d = os.path.join(HERE, "test_" + case)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for k, (n, _, _, v) in enumerate(ins):
        with open(os.path.join(d, "test_data_set_0", "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(v, name=n).SerializeToString())
    for k, (n, _, _, v) in enumerate(outs):
        with open(os.path.join(d, "test_data_set_0", "output_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(v, name=n).SerializeToString())


def pairs(z):
    """complex array -> [..., 2] (real, imaginary)."""
    return np.stack([z.real, z.imag], axis=-1)


def complex_of(x):
    x = x.astype(np.float64)
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(np.complex128)


# ---- DFT -------------------------------------------------------------------

def dft_case(rng, name, shape, t=F32, axis=1, inverse=0, onesided=0, length=None, length_as="init",
             in_dims=None):
    x = rng.standard_normal(shape).astype(NP[t])
    z = complex_of(x)
    a = axis % len(shape)  # of x; z has one dim less and the same axis
    if inverse and onesided:
        n = length if length is not None else 2 * (shape[a] - 1)
        y = np.fft.irfft(z, n=n, axis=a)[..., None]
    elif inverse:
        y = pairs(np.fft.ifft(z, n=length, axis=a))
    else:
        y = np.fft.fft(z, n=length, axis=a)
        if onesided:
            y = np.take(y, range(y.shape[a] // 2 + 1), axis=a)
        y = pairs(y)
    y = y.astype(NP[t])
    attrs = {"axis": axis}
    if inverse:
        attrs["inverse"] = 1
    if onesided:
        attrs["onesided"] = 1
    ins = [("x", t, in_dims or list(shape), x)]
    inits = []
    node_in = ["x"]
    if length is not None:
        node_in.append("dft_length")
        if length_as == "init":
            inits.append(("dft_length", np.array(length, dtype=np.int64)))
        else:
            ins.append(("dft_length", I32, [], np.array(length, dtype=np.int32)))
    out_dims = list(y.shape)
    if in_dims:  # the symbolic dims carry over
        out_dims = [d if (isinstance(d, str) and k != a) else y.shape[k] for k, d in enumerate(in_dims[:-1])] + [y.shape[-1]]
    write_case(name, helper.make_node("DFT", node_in, ["y"], **attrs), ins, [("y", t, out_dims, y)], inits)


# ---- STFT ------------------------------------------------------------------

def stft_case(rng, name, B, S, C, step, t=F32, window=None, frame_length=None, onesided=None):
    x = rng.standard_normal((B, S, C)).astype(NP[t])
    z = complex_of(x)
    F = frame_length if frame_length is not None else (len(window) if window is not None else S)
    w = np.ones(F) if window is None else window.astype(np.float64)
    frames = (S - F) // step + 1
    y = np.stack([np.fft.fft(z[:, f * step:f * step + F] * w, axis=1) for f in range(frames)], axis=1)
    if onesided is None or onesided:
        y = y[:, :, :F // 2 + 1]
    y = pairs(y).astype(NP[t])
    ins = [("signal", t, [B, S, C], x), ("frame_step", I64, [], np.array(step, dtype=np.int64))]
    node_in = ["signal", "frame_step", "", ""]
    if window is not None:
        ins.append(("window", t, [len(window)], window.astype(NP[t])))
        node_in[2] = "window"
    if frame_length is not None:
        ins.append(("frame_length", I64, [], np.array(frame_length, dtype=np.int64)))
        node_in[3] = "frame_length"
    while node_in[-1] == "":
        node_in.pop()
    attrs = {} if onesided is None else {"onesided": onesided}
    write_case(name, helper.make_node("STFT", node_in, ["y"], **attrs), ins, [("y", t, list(y.shape), y)])


# ---- MelWeightMatrix (the ONNX definition, step by step) -------------------

def mel_matrix(M, L, sr, lo, hi):
    mel = lambda f: 2595 * math.log1p(f / 700) / math.log(10)
    step = (mel(hi) - mel(lo)) / (M + 2)
    pts = [int((L + 1) * (700 * math.expm1((i * step + mel(lo)) / 2595 * math.log(10))) // sr) for i in range(M + 2)]
    w = np.zeros((L // 2 + 1, M))
    for i in range(M):
        l, c, h = pts[i], pts[i + 1], pts[i + 2]
        if c == l:
            w[c, i] = 1
        else:
            for j in range(l, c + 1):
                w[j, i] = (j - l) / (c - l)
        for j in range(c, h):
            w[j, i] = (h - j) / (h - c)
    return w


def mel_case(name, M, L, sr, lo, hi, it=I64, ft=F32, out=None):
    y = mel_matrix(M, L, sr, float(NP[ft](lo)), float(NP[ft](hi)))
    ot = out if out is not None else F32
    y = np.trunc(y).astype(NP[ot]) if ot in (I32, I64) else y.astype(NP[ot])
    ins = [("num_mel_bins", it, [], np.array(M, dtype=NP[it])), ("dft_length", it, [], np.array(L, dtype=NP[it])),
           ("sample_rate", it, [], np.array(sr, dtype=NP[it])),
           ("lower_edge_hertz", ft, [], np.array(lo, dtype=NP[ft])),
           ("upper_edge_hertz", ft, [], np.array(hi, dtype=NP[ft]))]
    attrs = {} if out is None else {"output_datatype": out}
    write_case(name, helper.make_node("MelWeightMatrix", [n for n, *_ in ins], ["y"], **attrs), ins,
               [("y", ot, list(y.shape), y)])


# ---- TfIdfVectorizer (the definition: n-grams with skips, looked up) -------

def tfidf(X, mode, lo, hi, skip, counts, index, pool, weights=None):
    grams, k = {}, 0  # (length, tuple) -> global id; the last listing wins
    for i, start in enumerate(counts):
        n = i + 1
        end = counts[i + 1] if i + 1 < len(counts) else len(pool)
        for j in range(start, end, n):
            if lo <= n <= hi:
                grams[(n, tuple(pool[j:j + n]))] = k
            k += 1
    size = max(index) + 1
    rows = X.reshape(1, -1) if X.ndim < 2 else X
    Y = np.zeros((rows.shape[0], size))
    for r, row in enumerate(rows):
        f = np.zeros(k, dtype=np.int64)  # per pool n-gram
        for s in range(skip + 1):
            for start in range(len(row)):
                for n in range(max(lo, 2 if s else 1), hi + 1):
                    items = row[start:start + (n - 1) * (s + 1) + 1:s + 1]
                    if start + (n - 1) * (s + 1) >= len(row):
                        break
                    g = grams.get((n, tuple(int(v) for v in items)))
                    if g is not None:
                        f[g] += 1
        # "the i-th element in weights is the weight of the i-th n-gram in pool"
        w = np.ones(k) if weights is None else np.asarray(weights, dtype=np.float64)
        v = f if mode == "TF" else (np.where(f > 0, w, 0) if mode == "IDF" else w * f)
        for g in range(k):
            Y[r, index[g]] += v[g]
    return Y.astype(np.float32).reshape((size,) if X.ndim < 2 else (X.shape[0], size))


def tfidf_case(name, X, t, mode, lo, hi, skip, counts, index, pool, weights=None, in_dims=None):
    y = tfidf(X, mode, lo, hi, skip, counts, index, pool, weights)
    attrs = dict(mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip, ngram_counts=counts,
                 ngram_indexes=index, pool_int64s=pool)
    if weights is not None:
        attrs["weights"] = weights
    out_dims = list(y.shape)
    if in_dims and X.ndim == 2:
        out_dims[0] = in_dims[0]
    # the evaluator (1.23) fails on IDF/TFIDF without weights, and reads weights by output coordinate:
    # a permuted ngram_indexes is checked against onnxruntime (1.32 reads them as the text does)
    identity = list(index) == list(range(len(index)))
    write_case(name, helper.make_node("TfIdfVectorizer", ["X"], ["Y"], **attrs),
               [("X", t, in_dims or list(X.shape), X.astype(NP[t]))], [("Y", F32, out_dims, y)], opset=9,
               check=(weights is not None or mode == "TF") if identity else "ort")


# ---- GridSample on integer and bool X --------------------------------------

def gridsample_case(rng, name, x, mode, padding, align, grid_shape):
    """x: the integer or bool X (N, C, H, W); the grid random in [-1.3, 1.3]."""
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    grid = rng.uniform(-1.3, 1.3, grid_shape).astype(np.float32)
    attrs = dict(mode=mode, padding_mode=padding, align_corners=align)
    node = helper.make_node("GridSample", ["X", "grid"], ["Y"], **attrs)
    N, C, H, W = x.shape
    out_shape = [N, C, grid_shape[1], grid_shape[2]]

    def evaluate(xv):  # at opset 20 (the evaluator's GridSample knows only its mode names; 2-D is the same)
        n20 = helper.make_node("GridSample", ["X", "grid"], ["Y"], padding_mode=padding, align_corners=align,
                               mode={"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode))
        g = helper.make_graph([n20], "g", [helper.make_tensor_value_info("X", F64, xv.shape),
                                            helper.make_tensor_value_info("grid", F32, grid.shape)],
                              [helper.make_tensor_value_info("Y", F64, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
        return ReferenceEvaluator(m).run(None, {"X": xv, "grid": grid})[0]

    if mode == "nearest":  # the picked element's flat index + 1 (0: outside, zeros padding)
        picked = evaluate(np.arange(1, x.size + 1, dtype=np.float64).reshape(x.shape))
        picked = picked.astype(np.int64)
        assert np.all(picked == np.round(picked)), name
        flat = np.concatenate([np.zeros(1, x.dtype), x.ravel()])
        y = flat[picked]
    else:
        v = evaluate(x.astype(np.float64))
        if x.dtype == np.bool_:
            y = v != 0
        else:
            info = np.iinfo(x.dtype)
            y = np.clip(np.trunc(v), info.min, info.max).astype(x.dtype)
    try:  # a second opinion: onnxruntime (no integer GridSample) on X in float32, Y cast back
        import onnxruntime as ort
    except ImportError:
        ort = None
    if ort is not None and np.all(np.abs(x.astype(np.float64)) < 2.0**24):  # float32 holds X exactly
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", F32, x.shape),
                                            helper.make_tensor_value_info("grid", F32, grid.shape)],
                              [helper.make_tensor_value_info("Y", F32, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
        m.ir_version = 8
        v = ort.InferenceSession(m.SerializeToString()).run(None, {"X": x.astype(np.float32), "grid": grid})[0]
        w = v != 0 if x.dtype == np.bool_ else np.clip(np.trunc(v.astype(np.float64)), np.iinfo(x.dtype).min,
                                                        np.iinfo(x.dtype).max).astype(x.dtype)
        assert np.array_equal(w, y), (name, "onnxruntime on float32 X disagrees")
    write_case(name, node, [("X", t, list(x.shape), x), ("grid", F32, list(grid.shape), grid)],
               [("Y", t, out_shape, y)], opset=16, check=False)


def main():
    rng = np.random.default_rng(20261126)
    dft_case(rng, "dft_rfft_axis1", (2, 9, 3, 1), onesided=1)
    dft_case(rng, "dft_rfft_long", (2, 1000, 1), onesided=1)  # accuracy of a long non-power-of-two transform
    dft_case(rng, "dft_complex_pad", (2, 6, 2), axis=-2, length=8)
    dft_case(rng, "dft_real_cut_input_length", (3, 10, 1), length=7, length_as="input")
    dft_case(rng, "dft_inverse_axis0", (5, 3, 4, 2), axis=0, inverse=1)
    dft_case(rng, "dft_irfft", (2, 5, 2), inverse=1, onesided=1)
    dft_case(rng, "dft_irfft_odd_length", (2, 5, 3, 2), axis=-3, inverse=1, onesided=1, length=7)
    dft_case(rng, "dft_double_inverse_pad", (2, 64, 2), t=F64, inverse=1, length=70)
    dft_case(rng, "dft_symbolic_batch", (3, 12, 1), in_dims=["batch", 12, 1])
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(10) / 10)
    stft_case(rng, "stft_complex_twosided", 2, 40, 2, 5, frame_length=8, onesided=0)
    stft_case(rng, "stft_window_and_length", 1, 50, 1, 3, window=hann, frame_length=10)
    stft_case(rng, "stft_whole_signal", 2, 16, 1, 4)
    stft_case(rng, "stft_double_window", 1, 33, 1, 7, t=F64, window=hann[:9] + 0.25, onesided=1)
    mel_case("melweightmatrix_double", 10, 64, 16000, 20.0, 8000.0, out=F64)
    mel_case("melweightmatrix_int32_out", 6, 31, 8000, 100.0, 3900.0, it=I32, out=I32)
    mel_case("melweightmatrix_f16_out", 12, 128, 22050, 0.0, 11025.0, out=F16)
    rng2 = np.random.default_rng(20261127)  # the cases added later: the earlier ones keep their data
    # onesided with the input kind the operator text leaves out (the ONNX
    # reference evaluator accepts it: bins 0 .. L/2 of the full complex
    # transform; irfft of a real spectrum), even and odd L, dft_length
    dft_case(rng2, "dft_rfft_complex_input", (2, 9, 2), onesided=1)
    dft_case(rng2, "dft_rfft_complex_input_pad", (2, 9, 3, 2), onesided=1, length=12, length_as="input")
    dft_case(rng2, "dft_irfft_real_input", (2, 5, 1), inverse=1, onesided=1)
    dft_case(rng2, "dft_irfft_real_input_odd_length", (3, 6, 1), inverse=1, onesided=1, length=9)
    dft_case(rng2, "dft_irfft_even_length_input", (2, 4, 3, 2), inverse=1, onesided=1, length=10, length_as="input")
    dft_case(rng2, "dft_irfft_cut", (2, 9, 2), inverse=1, onesided=1, length=6)
    # the FFT paths: radix-2 (power-of-two lengths), Bluestein (others)
    dft_case(rng2, "dft_fft_pow2_inverse", (2, 256, 2), inverse=1)
    dft_case(rng2, "dft_fft_pow2_pad_f64", (3, 100, 1), t=F64, length=2048)
    dft_case(rng2, "dft_fft_bluestein_prime", (1, 4099, 1), onesided=1)
    dft_case(rng2, "dft_fft_bluestein_irfft", (2, 40, 2), inverse=1, onesided=1, length=77)
    X = np.array([[1, 4, 2, 7, 4, 2, 7, 9, 1, 4], [7, 9, 7, 9, 1, 4, 2, 2, 4, 2]])
    counts, pool = [0, 4, 10], [1, 2, 4, 7, 4, 2, 7, 9, 2, 2, 4, 2, 7, 1, 4, 2]
    tfidf_case("tfidf_idf_weights_3grams", X, I64, "IDF", 1, 3, 2, counts, list(range(9)), pool,
               weights=[0.5, 1.5, 2.0, 0.25, 3.0, 1.0, 0.75, 2.5, 4.0])
    tfidf_case("tfidf_tfidf_permuted", X, I32, "TFIDF", 1, 3, 1, counts, [7, 2, 8, 5, 0, 1, 6, 3, 4], pool,
               weights=[0.5, 1.5, 2.0, 0.25, 3.0, 1.0, 0.75, 2.5, 4.0])
    tfidf_case("tfidf_idf_noweights_1d", X[1], I64, "IDF", 2, 2, 3, counts, list(range(9)), pool)
    tfidf_case("tfidf_tf_repeated_gram", X, I64, "TF", 1, 2, 0, [0, 3], [0, 1, 2, 3, 4], [4, 7, 4, 4, 2, 7, 9])
    tfidf_case("tfidf_tfidf_symbolic_batch", X, I64, "TFIDF", 2, 3, 0, counts, list(range(9)), pool,
               in_dims=["n", 10])
    if ReferenceEvaluator is not None:  # GridSample's expectations come from it (onnx >= 1.13)
        rng3 = np.random.default_rng(20261128)
        big = rng3.integers(-(1 << 62), 1 << 62, (2, 3, 5, 4), dtype=np.int64)
        gridsample_case(rng3, "gridsample_nearest_int64_exact", big, "nearest", "zeros", 0, (2, 6, 7, 2))
        gridsample_case(rng3, "gridsample_nearest_uint16_reflection", rng3.integers(0, 65536, (1, 2, 4, 6),
                        dtype=np.uint16), "nearest", "reflection", 1, (1, 5, 5, 2))
        gridsample_case(rng3, "gridsample_bilinear_uint8_border", rng3.integers(0, 256, (2, 2, 6, 5),
                        dtype=np.uint8), "bilinear", "border", 1, (2, 4, 7, 2))
        gridsample_case(rng3, "gridsample_bilinear_int8_zeros", rng3.integers(-128, 128, (1, 3, 5, 5),
                        dtype=np.int8), "bilinear", "zeros", 0, (1, 6, 6, 2))
        gridsample_case(rng3, "gridsample_bicubic_int32_reflection", rng3.integers(-1000, 1000, (1, 2, 6, 7),
                        dtype=np.int32), "bicubic", "reflection", 0, (1, 5, 8, 2))
        gridsample_case(rng3, "gridsample_bilinear_bool", rng3.random((1, 2, 5, 5)) < 0.3, "bilinear", "zeros",
                        0, (1, 6, 6, 2))


if __name__ == "__main__":
    main()
