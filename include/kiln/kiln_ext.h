/* kiln_ext.h — kiln's ONNXIFI extension functions.
 *
 * Fetch each with onnxGetExtensionFunctionAddress(backendID, "<name>", &fn)
 * and cast to the typedef below. onnxGetBackendInfo(ONNXIFI_BACKEND_EXTENSIONS)
 * lists the names a backend offers. onnxSetIOAndRunGraph (declared in
 * ONNX's onnx/onnxifi_ext.h) is offered too. */
#ifndef KILN_EXT_H
#define KILN_EXT_H 1

#include <onnx/onnxifi.h>

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

/* onnx_extension_function: onnxifi_ext.h requires a backend that implements
 * onnxGetExtensionFunctionAddress to list it. */
#define KILN_EXTENSION_NAMES \
  "onnx_extension_function onnxSetIOAndRunGraph kilnGetLastErrorMessage kilnGetEventStatus"

#ifdef __cplusplus
}
#endif
#endif
