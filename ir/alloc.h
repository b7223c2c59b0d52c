/* ir/alloc: every heap allocation in kiln goes through these wrappers, so a
 * test build can fail the Nth allocation (fault injection) and so a hostile
 * size never reaches malloc unchecked. */
#ifndef KILN_IR_ALLOC_H
#define KILN_IR_ALLOC_H
#include <stddef.h>

/* Largest single allocation kiln makes (bytes); bigger requests fail. The
 * fuzz build (KILN_FUZZ) lowers it to 16 MiB, so that a fuzzed model's
 * legitimately big tensors fail fast instead of reading as out-of-memory
 * or timeouts under libFuzzer's limits. */
#ifdef KILN_FUZZ_BUILD
#define KILN_MAX_ALLOC ((size_t)1 << 24)
#else
#define KILN_MAX_ALLOC ((size_t)1 << 36)
#endif

void *kiln_malloc(size_t n);
void *kiln_calloc(size_t count, size_t size);
void *kiln_realloc(void *p, size_t n);
void kiln_free(void *p);
char *kiln_strdup(const char *s);
char *kiln_strndup(const char *s, size_t n);

#endif
