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
} kilnGraphStatistics;
typedef onnxStatus (*kilnGetGraphStatisticsFunction)(onnxGraph graph, kilnGraphStatistics *stats);

/* onnx_extension_function: onnxifi_ext.h requires a backend that implements
 * onnxGetExtensionFunctionAddress to list it. */
#define KILN_EXTENSION_NAMES \
  "onnx_extension_function onnxSetIOAndRunGraph kilnGetLastErrorMessage kilnGetEventStatus " \
  "kilnGetGraphStatistics"

#ifdef __cplusplus
}
#endif
#endif
