/* kiln_ext.h — kiln's ONNXIFI extension functions.
 *
 * Fetch each with onnxGetExtensionFunctionAddress(backendID, "<name>", &fn)
 * and cast to the typedef below. onnxGetBackendInfo(ONNXIFI_BACKEND_EXTENSIONS)
 * lists the names a backend offers. onnxSetIOAndRunGraph (declared in
 * ONNX's onnx/onnxifi_ext.h) is offered too. */
#ifndef KILN_EXT_H
#define KILN_EXT_H 1

#include <onnx/onnxifi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "kilnGetLastErrorMessage": the calling thread's message for the last
 * kiln function that failed on it (node name, op type, what was wrong), or
 * "" when none. *message stays valid until the thread's next kiln call.
 * Returns ONNXIFI_STATUS_INVALID_POINTER when message is NULL. */
typedef onnxStatus (*kilnGetLastErrorMessageFunction)(const char **message);

/* "kilnGetEventStatus": for an event made by onnxRunGraph (or
 * onnxSetIOAndRunGraph), the outcome of that run once the event is
 * signalled: *runStatus is ONNXIFI_STATUS_SUCCESS or the failure's code, and
 * *message (optional, may be NULL) the failure's text, valid until the
 * event is released. For a caller-made event, or one not yet signalled,
 * *runStatus is ONNXIFI_STATUS_SUCCESS and *message "". Returns
 * ONNXIFI_STATUS_INVALID_EVENT for an unknown or released event and
 * ONNXIFI_STATUS_INVALID_POINTER when runStatus is NULL. */
typedef onnxStatus (*kilnGetEventStatusFunction)(onnxEvent event, onnxStatus *runStatus, const char **message);

/* "kilnGetGraphStatistics": what kiln made of a graph. The caller sets
 * stats->size = sizeof(kilnGraphStatistics); kiln fills the rest. Read it
 * when the runs it should count have finished. Returns INVALID_GRAPH for an
 * unknown or released graph, INVALID_POINTER for NULL stats, INVALID_SIZE
 * when stats->size is smaller than this version of the struct. */
typedef struct kilnGraphStatistics {
  uint64_t size;
  uint64_t nodesImported;     /* nodes of the model as given */
  uint64_t nodesPlanned;      /* nodes after rewrites (folding, CSE, DCE, BN folding) */
  uint64_t viewNodes;         /* nodes run as strided aliases: no kernel, no copy */
  uint64_t kernelNodes;       /* nodes run by a kernel */
  uint64_t memoryPlans;       /* arena plans made: 1, plus one per run beyond the bounds */
  uint64_t arenaBytes;        /* the planned peak of the intermediates' arena */
  uint64_t lowerBoundBytes;   /* liveness lower bound: max bytes live at one step */
  uint64_t noReuseBytes;      /* one buffer per intermediate, no reuse */
  uint64_t materializedViews; /* views that had to be copied, over all runs */
  /* what the rewrites did (0 on backends that run the graph as given) */
  uint64_t foldedNodes;       /* nodes evaluated once at init and replaced by constants */
  uint64_t batchNormsFolded;  /* BatchNormalizations folded into a Conv or Gemm */
  uint64_t cseMerged;         /* nodes and constants merged into an equal one */
  uint64_t noOpsRemoved;      /* Identity and inference Dropout nodes removed */
  uint64_t transposesMerged;  /* Transposes composed with another or removed as identity */
  uint64_t deadNodesRemoved;  /* nodes whose outputs reach no graph output */
  /* fusion (0 with KILN_FUSION=0 or on backends that do not fuse) */
  uint64_t fusedGroups;       /* kernels that each run two or more nodes (fused groups) */
  uint64_t fusedNodes;        /* nodes inside those groups */
  /* where the runs ran (added after the fields above: a host built with the
   * shorter struct passes its smaller size and gets the fields it knows) */
  uint64_t runsOnWorker;        /* runs executed by the graph's worker thread */
  uint64_t runsOnWaitingThread; /* runs executed by the host thread that waited on their output event (the run
                                   had not started and its input was signalled; KILN_RUN_ON_WAIT=0: never) */
  uint64_t importedFromCache;   /* 1: the graph as imported was read from the backend's cache (OpenCL: the kiln
                                   cache's record keyed by the model bytes and weights as given), not parsed */
} kilnGraphStatistics;
typedef onnxStatus (*kilnGetGraphStatisticsFunction)(onnxGraph graph, kilnGraphStatistics *stats);

/* ---- Observers: the value range of every node output (Caffe2's
 * OutputMinMaxObserver / OutputMinMaxNetObserver and histogram observers).
 *
 * A record per node output of the graph as given: node index, op type,
 * output index, tensor name; min and max since the last reset and over all
 * runs (NaN ignored, infinities included), NaN / +inf / -inf counts, run
 * counts. The line formats (fields joined by the delimiter, default ' '):
 *   ranges:      op_index op_type output_idx tensor_name min max
 *   histograms:  op_index op_type output_idx tensor_name min max nbins c_0 ... c_{nbins-1}
 *   qparams:     op_index op_type output_idx tensor_name min max scale zero_point precision
 * Records with nothing recorded are left out of the files. Files are
 * written atomically (a temporary, then rename); a file that cannot be
 * written gives INVALID_NAME with the reason in kilnGetLastErrorMessage.
 * Every function returns INVALID_GRAPH for an unknown graph, INVALID_STATE
 * when the graph has no observer (never started) and INVALID_POINTER for a
 * NULL path or count. Observer calls wait for the run in progress on the
 * graph, if any, and take effect between runs; the runs already queued are
 * observed from the next one that starts. */

/* Flags of kilnObserverOptions.flags. */
#define KILN_OBSERVE_ALL 1u /* turn off the rewrites that erase node outputs
                               (BatchNorm folding, CSE, ...), so that every
                               node output of the model is observed; takes
                               effect at the next run (the backend may
                               recompile the graph then) */
#define KILN_OBSERVE_RESUME 2u /* resume a stopped observer: keep its records
                                  and options (the other fields are ignored);
                                  without one, start afresh */

typedef struct kilnObserverOptions {
  uint64_t size;           /* sizeof(kilnObserverOptions) */
  uint32_t flags;          /* KILN_OBSERVE_* */
  uint32_t histogramBins;  /* histograms with this many bins (ranges widen
                              across runs); 0: none */
  uint64_t dumpFrequency;  /* with dumpFile: every dumpFrequency runs, write
                              the ranges to <stem>_<k><ext> (dumpFile split at
                              its extension, k = runs / dumpFrequency) and
                              reset them; 0: no periodic dumps */
  const char *dumpFile;    /* at stop, the total ranges go to dumpFile itself
                              (and, with histograms, the histograms to
                              <stem>_hist<ext>); NULL: no files */
  char delimiter;          /* field delimiter of the files; 0: ' ' */
} kilnObserverOptions;

/* One record (kilnGetObservedRanges). Strings stay valid until the graph
 * is released. */
typedef struct kilnObservedRange {
  uint32_t nodeIndex;      /* the node in the model as given */
  uint32_t outputIndex;
  const char *opType;
  const char *tensorName;
  uint32_t dataType;       /* ONNXIFI_DATATYPE_* of the last tensor seen; 0 before */
  int32_t foldedInto;      /* a rewrite erased this tensor: the index (in this
                              array) of the record that replaced it, else -1 */
  uint32_t erased;         /* 1: erased with no replacement (dead code) */
  uint32_t reserved;
  double min, max;         /* since the last reset; +inf/-inf when none */
  double totalMin, totalMax;
  uint64_t nanCount, posInfCount, negInfCount;                /* since the last reset */
  uint64_t totalNanCount, totalPosInfCount, totalNegInfCount;
  uint64_t runs, totalRuns; /* runs that recorded this tensor */
  uint64_t elements, totalElements;
} kilnObservedRange;

/* "kilnStartObserving": starts recording on graph (replacing an earlier
 * observer and its data). options may be NULL (min/max only, no files).
 * INVALID_GRAPH, INVALID_SIZE (options->size too small), INVALID_POINTER
 * (dumpFrequency without dumpFile), UNSUPPORTED_ATTRIBUTE (too many bins),
 * NO_SYSTEM_MEMORY. */
typedef onnxStatus (*kilnStartObservingFunction)(onnxGraph graph, const kilnObserverOptions *options);
/* "kilnStopObserving": stops recording; writes the totals (and histograms)
 * when the options named a dumpFile. The records stay readable until the
 * next start or the graph's release. INVALID_STATE when never started. */
typedef onnxStatus (*kilnStopObservingFunction)(onnxGraph graph);
/* "kilnGetObservedRanges": *count in: the room in ranges; out: the number
 * of records. FALLBACK (count set) when ranges is NULL or too small. */
typedef onnxStatus (*kilnGetObservedRangesFunction)(onnxGraph graph, kilnObservedRange *ranges, size_t *count);
/* "kilnDumpObservedRanges": writes the ranges since the last reset to path
 * and resets them (totals and histograms stay). */
typedef onnxStatus (*kilnDumpObservedRangesFunction)(onnxGraph graph, const char *path);
/* "kilnWriteObservedHistograms": writes the histograms to path. */
typedef onnxStatus (*kilnWriteObservedHistogramsFunction)(onnxGraph graph, const char *path);
/* "kilnWriteQuantizationParams": writes quantization parameters from the
 * total ranges: method KILN_QPARAMS_MINMAX, _L2 or _KL (L2 and KL choose
 * the range from the histogram; without one they use min/max), scheme
 * KILN_QPARAMS_AFFINE_UINT8 (zero included, zero point nudged to an
 * integer) or KILN_QPARAMS_SYMMETRIC_INT8 (zero point 0), precision 8. */
#define KILN_QPARAMS_MINMAX 0u
#define KILN_QPARAMS_L2 1u
#define KILN_QPARAMS_KL 2u
#define KILN_QPARAMS_AFFINE_UINT8 0u
#define KILN_QPARAMS_SYMMETRIC_INT8 1u
typedef onnxStatus (*kilnWriteQuantizationParamsFunction)(onnxGraph graph, const char *path, uint32_t method,
                                                          uint32_t scheme);

/* onnx_extension_function: onnxifi_ext.h requires a backend that implements
 * onnxGetExtensionFunctionAddress to list it. */
#define KILN_EXTENSION_NAMES \
  "onnx_extension_function onnxSetIOAndRunGraph kilnGetLastErrorMessage kilnGetEventStatus " \
  "kilnGetGraphStatistics kilnStartObserving kilnStopObserving kilnGetObservedRanges kilnDumpObservedRanges " \
  "kilnWriteObservedHistograms kilnWriteQuantizationParams"

#ifdef __cplusplus
}
#endif
#endif
