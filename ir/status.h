/* ir/status: kiln's one internal status type and the thread-local last-error
 * message. Every failing function returns a kiln_status and, through
 * kiln_fail(), leaves a message naming what was wrong; the plugin layer maps
 * the status to an ONNXIFI code at the boundary. */
#ifndef KILN_IR_STATUS_H
#define KILN_IR_STATUS_H

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_E_NOMEM,              /* host memory exhausted (or a limit exceeded) */
  KILN_E_PROTOBUF,           /* bytes are not a ModelProto / TensorProto */
  KILN_E_MODEL,              /* well-formed protobuf, invalid ONNX model */
  KILN_E_VERSION,            /* IR or opset version not supported */
  KILN_E_UNSUPPORTED_OP,     /* operator not implemented */
  KILN_E_UNSUPPORTED_ATTR,   /* attribute or attribute value not supported */
  KILN_E_UNSUPPORTED_DTYPE,  /* data type not supported (strings, sequences) */
  KILN_E_UNSUPPORTED_SHAPE,  /* shape not supported (zero dims, rank > max) */
  KILN_E_INVALID_SHAPE,      /* caller gave an impossible shape */
  KILN_E_INVALID_DTYPE,      /* caller gave an unknown data type */
  KILN_E_MISMATCH_SHAPE,     /* shapes disagree (model vs data, op inputs) */
  KILN_E_MISMATCH_DTYPE,     /* types disagree */
  KILN_E_INVALID_VALUE,      /* run-time data invalid (index out of range) */
  KILN_E_DEVICE_MEMORY,      /* the device's memory is exhausted */
  KILN_E_DEVICE_RESOURCES,   /* other device resources are (queues, registers…) */
  KILN_E_DEVICE_LOST,        /* the device went away */
  KILN_E_INTERNAL,           /* broken invariant inside kiln */
  KILN_E_SYMBOLIC_SHAPE      /* symbolic dims not provably compatible: equal (or
                                broadcastable) for some sizes of their symbols
                                only, so only a run's concrete sizes decide */
} kiln_status;

/* Sets the thread-local last-error message (printf format) and returns s.
 * When KILN_LOG is info or debug the message is also printed to stderr. */
kiln_status kiln_fail(kiln_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to the current message (for adding the node context). */
void kiln_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The calling thread's last error message; "" when none. */
const char *kiln_last_error(void);
void kiln_error_clear(void);
/* Replaces the calling thread's message (used to hand a worker's message on). */
void kiln_error_set_message(const char *msg);

const char *kiln_status_name(kiln_status s);

/* Logging: level from KILN_LOG (error|warn|info|debug; default error). */
enum { KILN_LOG_ERROR = 0, KILN_LOG_WARN = 1, KILN_LOG_INFO = 2, KILN_LOG_DEBUG = 3 };
int kiln_log_level(void);
void kiln_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
