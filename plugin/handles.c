/* plugin/handles: the registry of live handles. Every ONNXIFI handle kiln
 * gives out is recorded here with its kind; every handle a host passes in is
 * looked up before use, so a stale or foreign pointer gets INVALID_* rather
 * than a crash. This set (under one mutex) is kiln's only global state
 * besides the documented caches. */
#include <stdint.h>

#include "ir/alloc.h"
#include "plugin/plugin.h"

typedef struct entry {
  const void *p;
  kiln_handle_kind kind;
} entry;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static entry *reg;
static size_t reg_n, reg_cap;

kiln_status kiln_handle_add(void *p, kiln_handle_kind kind) {
  pthread_mutex_lock(&reg_mu);
  if (reg_n == reg_cap) {
    size_t cap = reg_cap ? reg_cap * 2 : 64;
    entry *r = kiln_realloc(reg, cap * sizeof *r);
    if (!r) {
      pthread_mutex_unlock(&reg_mu);
      return kiln_fail(KILN_E_NOMEM, "out of memory registering a handle");
    }
    reg = r;
    reg_cap = cap;
  }
  reg[reg_n++] = (entry){p, kind};
  pthread_mutex_unlock(&reg_mu);
  return KILN_OK;
}

bool kiln_handle_remove(void *p, kiln_handle_kind kind) {
  bool found = false;
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < reg_n; i++)
    if (reg[i].p == p && reg[i].kind == kind) {
      reg[i] = reg[--reg_n];
      found = true;
      break;
    }
  if (!reg_n) { /* give the memory back when nothing is live */
    kiln_free(reg);
    reg = NULL;
    reg_cap = 0;
  }
  pthread_mutex_unlock(&reg_mu);
  return found;
}

bool kiln_handle_valid(const void *p, kiln_handle_kind kind) {
  bool found = false;
  if (!p) return false;
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < reg_n && !found; i++) found = reg[i].p == p && reg[i].kind == kind;
  pthread_mutex_unlock(&reg_mu);
  return found;
}
