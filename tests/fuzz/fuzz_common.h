/* tests/fuzz/fuzz_common.h: what the libFuzzer targets share — the
 * backends (made once through the ONNXIFI entry points, kept for the
 * process), a status check, and a little byte reader. Header-only. */
#ifndef KILN_FUZZ_COMMON_H
#define KILN_FUZZ_COMMON_H
#include <onnx/onnxifi.h>
#include <onnx/onnxifi_ext.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/kiln/kiln_ext.h"

#define FUZZ_MAX_BACKENDS 4

typedef struct fuzz_backends {
  size_t n;
  onnxBackendID ids[FUZZ_MAX_BACKENDS];
  onnxBackend backends[FUZZ_MAX_BACKENDS];
  const char *names[FUZZ_MAX_BACKENDS];
} fuzz_backends;

static inline void fuzz_abort(const char *what) {
  fprintf(stderr, "fuzz: %s\n", what);
  abort();
}

static kilnGetLastErrorMessageFunction fuzz_get_last_error;

/* The calling thread's last kiln message ("" when there is none). */
static inline const char *fuzz_last_error(void) {
  const char *m = NULL;
  if (!fuzz_get_last_error || fuzz_get_last_error(&m) != ONNXIFI_STATUS_SUCCESS || !m) return "";
  return m;
}

/* The backends of KILN_DEVICE (default "reference,cpu"), made once. */
static inline fuzz_backends *fuzz_setup(void) {
  static fuzz_backends fb;
  static int done;
  if (done) return &fb;
  done = 1;
  setenv("KILN_DEVICE", "reference,cpu", 0);
  size_t n = FUZZ_MAX_BACKENDS;
  if (onnxGetBackendIDs(fb.ids, &n) != ONNXIFI_STATUS_SUCCESS) fuzz_abort("onnxGetBackendIDs failed");
  for (size_t i = 0; i < n; i++) {
    char name[64];
    size_t sz = sizeof name;
    if (onnxGetBackendInfo(fb.ids[i], ONNXIFI_BACKEND_NAME, name, &sz) != ONNXIFI_STATUS_SUCCESS)
      fuzz_abort("onnxGetBackendInfo(NAME) failed");
    fb.names[i] = strdup(name);
    if (onnxInitBackend(fb.ids[i], NULL, &fb.backends[i]) != ONNXIFI_STATUS_SUCCESS)
      fuzz_abort("onnxInitBackend failed");
  }
  onnxExtensionFunctionPointer fp = NULL;
  if (!n || onnxGetExtensionFunctionAddress(fb.ids[0], "kilnGetLastErrorMessage", &fp) != ONNXIFI_STATUS_SUCCESS)
    fuzz_abort("no kilnGetLastErrorMessage");
  fuzz_get_last_error = (kilnGetLastErrorMessageFunction)(void (*)(void))fp;
  fb.n = n;
  return &fb;
}

/* A status must be one the header defines, and a failure must come with
 * a message (kilnGetLastErrorMessage). INTERNAL_ERROR is a finding too
 * (set KILN_FUZZ_ALLOW_INTERNAL=1 to accept it). KILN_FUZZ_VERBOSE=1 prints
 * every failure's message. */
static inline void fuzz_check_status(const char *fn, onnxStatus st) {
  static int allow = -1, verbose = -1;
  if (allow < 0) allow = getenv("KILN_FUZZ_ALLOW_INTERNAL") != NULL;
  if (verbose < 0) verbose = getenv("KILN_FUZZ_VERBOSE") != NULL;
  if (st == ONNXIFI_STATUS_SUCCESS || st == ONNXIFI_STATUS_FALLBACK) return;
  const char *m = fuzz_last_error();
  if (verbose) fprintf(stderr, "fuzz: %s: status 0x%x: %s\n", fn, (unsigned)st, m);
  if (st > ONNXIFI_STATUS_BACKEND_UNAVAILABLE) {
    fprintf(stderr, "fuzz: %s returned an undefined status 0x%x (%s)\n", fn, (unsigned)st, m);
    abort();
  }
  if (st == ONNXIFI_STATUS_INTERNAL_ERROR && !allow) {
    fprintf(stderr, "fuzz: %s returned INTERNAL_ERROR: %s\n", fn, m);
    abort();
  }
  if (!*m) {
    fprintf(stderr, "fuzz: %s returned status 0x%x with no message\n", fn, (unsigned)st);
    abort();
  }
}

/* ---- byte reader: past the end, every read is 0 ---- */
typedef struct fuzz_reader {
  const uint8_t *p;
  size_t n;
} fuzz_reader;

static inline uint8_t fr_u8(fuzz_reader *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}

static inline uint64_t fr_u64(fuzz_reader *r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)fr_u8(r) << (8 * i);
  return v;
}

#endif
