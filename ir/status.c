/* ir/status: last-error message (thread-local) and logging. */
#include "ir/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KILN_MSG_MAX 1024

static _Thread_local char last_msg[KILN_MSG_MAX];

int kiln_log_level(void) {
  /* Read each time: cheap, and tests may change KILN_LOG between graphs. */
  const char *v = getenv("KILN_LOG");
  if (!v || !*v) return KILN_LOG_ERROR - 1; /* silent by default */
  if (!strcmp(v, "debug")) return KILN_LOG_DEBUG;
  if (!strcmp(v, "info")) return KILN_LOG_INFO;
  if (!strcmp(v, "warn") || !strcmp(v, "warning")) return KILN_LOG_WARN;
  return KILN_LOG_ERROR;
}

void kiln_log(int level, const char *fmt, ...) {
  if (level > kiln_log_level()) return;
  static const char *names[] = {"error", "warn", "info", "debug"};
  char buf[KILN_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "kiln[%s]: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], buf);
}

kiln_status kiln_fail(kiln_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_msg, sizeof last_msg, fmt, ap);
  va_end(ap);
  kiln_log(KILN_LOG_INFO, "%s: %s", kiln_status_name(s), last_msg);
  return s;
}

void kiln_error_prefix(const char *fmt, ...) {
  char pre[KILN_MSG_MAX], old[KILN_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, last_msg, sizeof old);
  size_t k = strlen(pre);
  if (k > KILN_MSG_MAX - 3) k = KILN_MSG_MAX - 3;
  memcpy(last_msg, pre, k);
  last_msg[k] = ':';
  last_msg[k + 1] = ' ';
  size_t rest = strlen(old), room = KILN_MSG_MAX - k - 3;
  if (rest > room) rest = room;
  memcpy(last_msg + k + 2, old, rest);
  last_msg[k + 2 + rest] = 0;
}

const char *kiln_last_error(void) { return last_msg; }
void kiln_error_clear(void) { last_msg[0] = 0; }

void kiln_error_set_message(const char *msg) {
  snprintf(last_msg, sizeof last_msg, "%s", msg ? msg : "");
}

const char *kiln_status_name(kiln_status s) {
  switch (s) {
  case KILN_OK: return "ok";
  case KILN_E_NOMEM: return "out of memory";
  case KILN_E_PROTOBUF: return "invalid protobuf";
  case KILN_E_MODEL: return "invalid model";
  case KILN_E_VERSION: return "unsupported version";
  case KILN_E_UNSUPPORTED_OP: return "unsupported operator";
  case KILN_E_UNSUPPORTED_ATTR: return "unsupported attribute";
  case KILN_E_UNSUPPORTED_DTYPE: return "unsupported data type";
  case KILN_E_UNSUPPORTED_SHAPE: return "unsupported shape";
  case KILN_E_INVALID_SHAPE: return "invalid shape";
  case KILN_E_INVALID_DTYPE: return "invalid data type";
  case KILN_E_MISMATCH_SHAPE: return "mismatching shape";
  case KILN_E_MISMATCH_DTYPE: return "mismatching data type";
  case KILN_E_INVALID_VALUE: return "invalid value";
  case KILN_E_DEVICE_MEMORY: return "out of device memory";
  case KILN_E_DEVICE_RESOURCES: return "out of device resources";
  case KILN_E_DEVICE_LOST: return "device lost";
  case KILN_E_INTERNAL: return "internal error";
  case KILN_E_SYMBOLIC_SHAPE: return "shape decided by the run's sizes";
  }
  return "unknown status";
}
