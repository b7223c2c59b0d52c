/* ir/alloc: checked allocation wrappers. */
#include "ir/alloc.h"

#include <stdlib.h>
#include <string.h>

void *kiln_malloc(size_t n) {
  if (n > KILN_MAX_ALLOC) return NULL;
  return malloc(n ? n : 1);
}

void *kiln_calloc(size_t count, size_t size) {
  if (size && count > KILN_MAX_ALLOC / size) return NULL;
  return calloc(count ? count : 1, size ? size : 1);
}

void *kiln_realloc(void *p, size_t n) {
  if (n > KILN_MAX_ALLOC) return NULL;
  return realloc(p, n ? n : 1);
}

void kiln_free(void *p) { free(p); }

char *kiln_strndup(const char *s, size_t n) {
  char *d = kiln_malloc(n + 1);
  if (!d) return NULL;
  if (n) memcpy(d, s, n); /* s may be NULL when n is 0 (an empty protobuf bytes field) */
  d[n] = 0;
  return d;
}

char *kiln_strdup(const char *s) { return s ? kiln_strndup(s, strlen(s)) : NULL; }
