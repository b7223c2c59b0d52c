"""bench/kiln_abi.py: kiln's ONNXIFI 1.0 ABI from Python, through ctypes.

No compiled glue: the plugin is dlopen'ed with ctypes.CDLL, the two ABI
structures (onnxTensorDescriptorV1, onnxMemoryFenceV1) are declared here as
in onnx/onnxifi.h, and kiln's extensions (kilnGetLastErrorMessage,
kilnGetEventStatus, include/kiln/kiln_ext.h) are fetched through
onnxGetExtensionFunctionAddress for error messages.

    lib = KilnLibrary("build/release/plugin/libonnxifi-kiln.so")
    for b in lib.backends(): print(b.index, b.name, b.device)
    backend = lib.init_backend(0)
    graph = backend.init_graph(open("m.onnx", "rb").read())
    graph.bind({"x": x}, {"y": y})      # numpy arrays, C-contiguous
    graph.run()                          # SetGraphIO, RunGraph, SignalEvent, WaitEvent
    graph.release(); backend.release(); lib.close()

Failures raise KilnError(call, status, message). Only numpy is needed.
"""
import ctypes as C

import numpy as np

TAG_TENSOR_DESCRIPTOR_V1 = 0x43DFBF69
TAG_MEMORY_FENCE_V1 = 0x23E08AAB
SYNCHRONIZATION_EVENT = 0
MEMORY_TYPE_CPU = 0
BACKEND_NAME, BACKEND_DEVICE, BACKEND_DEVICE_TYPE = 1, 5, 6

STATUS = {
    0x0000: "SUCCESS", 0x0001: "FALLBACK", 0x0101: "INVALID_ID", 0x0102: "INVALID_SIZE",
    0x0103: "INVALID_POINTER", 0x0104: "INVALID_PROTOBUF", 0x0105: "INVALID_MODEL", 0x0106: "INVALID_BACKEND",
    0x0107: "INVALID_GRAPH", 0x0108: "INVALID_EVENT", 0x0109: "INVALID_STATE", 0x010A: "INVALID_NAME",
    0x010B: "INVALID_SHAPE", 0x010C: "INVALID_DATATYPE", 0x010D: "INVALID_MEMORY_TYPE",
    0x010E: "INVALID_MEMORY_LOCATION", 0x010F: "INVALID_FENCE_TYPE", 0x0110: "INVALID_PROPERTY",
    0x0201: "UNSUPPORTED_TAG", 0x0202: "UNSUPPORTED_VERSION", 0x0203: "UNSUPPORTED_OPERATOR",
    0x0204: "UNSUPPORTED_ATTRIBUTE", 0x0205: "UNSUPPORTED_SHAPE", 0x0206: "UNSUPPORTED_DATATYPE",
    0x0207: "UNSUPPORTED_MEMORY_TYPE", 0x0208: "UNSUPPORTED_FENCE_TYPE", 0x0209: "UNSUPPORTED_PROPERTY",
    0x0301: "UNIDENTIFIED_NAME", 0x0302: "MISMATCHING_SHAPE", 0x0303: "MISMATCHING_DATATYPE",
    0x0401: "NO_SYSTEM_MEMORY", 0x0402: "NO_DEVICE_MEMORY", 0x0403: "NO_SYSTEM_RESOURCES",
    0x0404: "NO_DEVICE_RESOURCES", 0x0405: "BACKEND_UNAVAILABLE", 0x0406: "INTERNAL_ERROR",
}

# ONNXIFI_DATATYPE_* (TensorProto numbering); 9 (BOOL) is kiln's extension.
DATATYPE = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3, np.dtype(np.uint16): 4,
            np.dtype(np.int16): 5, np.dtype(np.int32): 6, np.dtype(np.int64): 7, np.dtype(np.bool_): 9,
            np.dtype(np.float16): 10, np.dtype(np.float64): 11, np.dtype(np.uint32): 12,
            np.dtype(np.uint64): 13}


class onnxTensorDescriptorV1(C.Structure):
    _fields_ = [("tag", C.c_int32), ("name", C.c_char_p), ("dataType", C.c_uint64), ("memoryType", C.c_uint64),
                ("dimensions", C.c_uint32), ("shape", C.POINTER(C.c_uint64)), ("buffer", C.c_uint64)]


class _FenceUnion(C.Union):
    _fields_ = [("event", C.c_void_p)]


class onnxMemoryFenceV1(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("tag", C.c_int32), ("type", C.c_uint64), ("u", _FenceUnion)]


class KilnError(RuntimeError):
    def __init__(self, call, status, message):
        self.call, self.status, self.message = call, status, message
        super().__init__(f"{call} failed: ONNXIFI_STATUS_{STATUS.get(status, hex(status))} "
                         f"(0x{status:04x}): {message or '(no message)'}")


_P = C.c_void_p
_PP = C.POINTER(C.c_void_p)
_SIG = {
    "onnxGetBackendIDs": (_PP, C.POINTER(C.c_size_t)),
    "onnxReleaseBackendID": (_P,),
    "onnxGetBackendInfo": (_P, C.c_int32, _P, C.POINTER(C.c_size_t)),
    "onnxInitBackend": (_P, C.POINTER(C.c_uint64), _PP),
    "onnxReleaseBackend": (_P,),
    "onnxInitEvent": (_P, _PP),
    "onnxSignalEvent": (_P,),
    "onnxWaitEvent": (_P,),
    "onnxReleaseEvent": (_P,),
    "onnxInitGraph": (_P, C.POINTER(C.c_uint64), C.c_size_t, C.c_char_p, C.c_uint32,
                      C.POINTER(onnxTensorDescriptorV1), _PP),
    "onnxSetGraphIO": (_P, C.c_uint32, C.POINTER(onnxTensorDescriptorV1), C.c_uint32,
                       C.POINTER(onnxTensorDescriptorV1)),
    "onnxRunGraph": (_P, C.POINTER(onnxMemoryFenceV1), C.POINTER(onnxMemoryFenceV1)),
    "onnxReleaseGraph": (_P,),
    "onnxGetExtensionFunctionAddress": (_P, C.c_char_p, _PP),
}
_GetLastErrorMessage = C.CFUNCTYPE(C.c_int32, C.POINTER(C.c_char_p))
_GetEventStatus = C.CFUNCTYPE(C.c_int32, _P, C.POINTER(C.c_int32), C.POINTER(C.c_char_p))


class BackendInfo:
    def __init__(self, index, name, device, device_type):
        self.index, self.name, self.device, self.device_type = index, name, device, device_type

    @property
    def short(self):
        """The engine's name without the "kiln-" prefix (its KILN_DEVICE token)."""
        return self.name[5:] if self.name.startswith("kiln-") else self.name


class KilnLibrary:
    """The plugin and the backend IDs that onnxGetBackendIDs offers (KILN_DEVICE
    chooses them; it is read when this object is made)."""

    def __init__(self, path):
        self.path = path
        self.dll = C.CDLL(path)
        for fn, args in _SIG.items():
            f = getattr(self.dll, fn)
            f.argtypes, f.restype = args, C.c_int32
        n = C.c_size_t(0)
        st = self.dll.onnxGetBackendIDs(None, C.byref(n))
        if st not in (0, 1):
            raise KilnError("onnxGetBackendIDs", st, "check KILN_DEVICE (the plugin printed why on stderr)")
        ids = (C.c_void_p * max(n.value, 1))()
        st = self.dll.onnxGetBackendIDs(ids, C.byref(n))
        if st:
            raise KilnError("onnxGetBackendIDs", st, "")
        self.ids = [ids[i] for i in range(n.value)]
        self._last_error = self._get_last_event = None
        if self.ids:
            fp = C.c_void_p()
            if not self.dll.onnxGetExtensionFunctionAddress(self.ids[0], b"kilnGetLastErrorMessage", C.byref(fp)):
                self._last_error = _GetLastErrorMessage(fp.value)
            if not self.dll.onnxGetExtensionFunctionAddress(self.ids[0], b"kilnGetEventStatus", C.byref(fp)):
                self._get_last_event = _GetEventStatus(fp.value)

    def last_error(self):
        """kilnGetLastErrorMessage: this thread's message for the last failed call."""
        if not self._last_error:
            return ""
        m = C.c_char_p()
        if self._last_error(C.byref(m)) or not m.value:
            return ""
        return m.value.decode(errors="replace")

    def check(self, call, st):
        if st:
            raise KilnError(call, st, self.last_error())

    def event_status(self, event):
        """kilnGetEventStatus: (status, message) of the run that signalled event."""
        if not self._get_last_event:
            return None, ""
        rs, m = C.c_int32(0), C.c_char_p()
        if self._get_last_event(event, C.byref(rs), C.byref(m)):
            return None, ""
        return rs.value, (m.value or b"").decode(errors="replace")

    def _info(self, i, what, as_string):
        if as_string:
            size = C.c_size_t(0)
            self.dll.onnxGetBackendInfo(self.ids[i], what, None, C.byref(size))
            buf = C.create_string_buffer(max(size.value, 1))
            if self.dll.onnxGetBackendInfo(self.ids[i], what, buf, C.byref(size)):
                return "?"
            return buf.value.decode(errors="replace")
        v, size = C.c_uint64(0), C.c_size_t(8)
        if self.dll.onnxGetBackendInfo(self.ids[i], what, C.byref(v), C.byref(size)):
            return None
        return v.value

    def backends(self):
        return [BackendInfo(i, self._info(i, BACKEND_NAME, True), self._info(i, BACKEND_DEVICE, True),
                            self._info(i, BACKEND_DEVICE_TYPE, False)) for i in range(len(self.ids))]

    def init_backend(self, index):
        h = C.c_void_p()
        self.check("onnxInitBackend", self.dll.onnxInitBackend(self.ids[index], None, C.byref(h)))
        return Backend(self, h)

    def close(self):
        for i in self.ids:
            self.dll.onnxReleaseBackendID(i)
        self.ids = []


class Backend:
    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle

    def init_graph(self, model_bytes):
        """onnxInitGraph with the model's own initializers (no weight descriptors)."""
        g = C.c_void_p()
        self.lib.check("onnxInitGraph", self.lib.dll.onnxInitGraph(self.handle, None, len(model_bytes), model_bytes,
                                                                   0, None, C.byref(g)))
        return Graph(self, g)

    def release(self):
        if self.handle:
            self.lib.dll.onnxReleaseBackend(self.handle)
            self.handle = None


def _descriptors(arrays):
    """onnxTensorDescriptorV1[] for {name: ndarray}; returns (array, keep-alive list)."""
    descs = (onnxTensorDescriptorV1 * max(len(arrays), 1))()
    keep = []
    for k, (name, a) in enumerate(arrays.items()):
        if not a.flags.c_contiguous:
            raise ValueError(f"{name}: the array must be C-contiguous")
        if a.dtype not in DATATYPE:
            raise ValueError(f"{name}: dtype {a.dtype} has no ONNXIFI data type")
        shape = (C.c_uint64 * max(a.ndim, 1))(*a.shape)
        bname = name.encode()
        keep += [shape, bname, a]
        descs[k] = onnxTensorDescriptorV1(TAG_TENSOR_DESCRIPTOR_V1, bname, DATATYPE[a.dtype], MEMORY_TYPE_CPU,
                                          a.ndim, shape, a.ctypes.data)
    return descs, keep


class Graph:
    def __init__(self, backend, handle):
        self.backend, self.lib, self.handle = backend, backend.lib, handle
        self._io = None

    def bind(self, inputs, outputs):
        """Inputs and outputs (dicts of C-contiguous numpy arrays, outputs
        preallocated with their final shapes) used by every later run()."""
        din, k1 = _descriptors(inputs)
        dout, k2 = _descriptors(outputs)
        self._io = (len(inputs), din, len(outputs), dout, k1 + k2)

    def run(self):
        """One run as an ONNXIFI host does it: onnxSetGraphIO, onnxRunGraph with
        an input event signalled after RunGraph returns, onnxWaitEvent on the
        output event, then both events released."""
        lib, dll = self.lib, self.lib.dll
        nin, din, nout, dout, _ = self._io
        lib.check("onnxSetGraphIO", dll.onnxSetGraphIO(self.handle, nin, din, nout, dout))
        in_ev = C.c_void_p()
        lib.check("onnxInitEvent", dll.onnxInitEvent(self.backend.handle, C.byref(in_ev)))
        fin = onnxMemoryFenceV1(TAG_MEMORY_FENCE_V1, SYNCHRONIZATION_EVENT)
        fin.event = in_ev
        fout = onnxMemoryFenceV1(TAG_MEMORY_FENCE_V1, SYNCHRONIZATION_EVENT)
        err = None
        st = dll.onnxRunGraph(self.handle, C.byref(fin), C.byref(fout))
        if st:
            err = KilnError("onnxRunGraph", st, lib.last_error())
        sst = dll.onnxSignalEvent(in_ev)
        if sst and not err:
            err = KilnError("onnxSignalEvent", sst, lib.last_error())
        if not st and fout.event:
            wst = dll.onnxWaitEvent(fout.event)
            if wst and not err:
                rs, msg = lib.event_status(fout.event)
                err = KilnError("run" if rs else "onnxWaitEvent", rs or wst, msg or lib.last_error())
            dll.onnxReleaseEvent(fout.event)
        dll.onnxReleaseEvent(in_ev)
        if err:
            raise err

    def release(self):
        if self.handle:
            self.lib.dll.onnxReleaseGraph(self.handle)
            self.handle = None
