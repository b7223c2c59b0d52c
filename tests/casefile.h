/* tests/casefile: loading ONNX node-test cases (model.onnx plus
 * test_data_set_N/{input,output}_K.pb) and grouping them by operator. */
#ifndef KILN_TESTS_CASEFILE_H
#define KILN_TESTS_CASEFILE_H
#include <stddef.h>

#include "ir/graph.h"

typedef struct tu_case {
  char name[256];
  char dir[1024];
  void *model;          /* model.onnx bytes (malloc'd) */
  size_t model_size;
  kiln_graph *graph;    /* imported (NULL if the import failed) */
  char op[64];          /* the operator the case tests, for the per-op table */
} tu_case;

/* Lists the case directories under root (sorted); returns the count and a
 * malloc'd array of malloc'd names in *names. */
int tu_list_cases(const char *root, char ***names);
/* Loads dir/model.onnx and imports it. Returns 0 if the model file could
 * not be read; an import failure leaves graph NULL (kiln_last_error says why). */
int tu_case_load(tu_case *c, const char *root, const char *name);
void tu_case_free(tu_case *c);
/* Loads test_data_set_<set>/<kind>_<k>.pb (kind "input" or "output");
 * returns 0 when the file does not exist. */
int tu_case_tensor(const tu_case *c, int set, const char *kind, int k, kiln_tensor *t, kiln_status *st);

/* A per-op pass/fail/unsupported tally, printed as a table. */
typedef struct tu_tally {
  int n;
  struct { char op[64]; int pass, fail, unsup; } row[512];
} tu_tally;
void tu_tally_add(tu_tally *t, const char *op, int result /* 0 pass, 1 fail, 2 unsupported */);
void tu_tally_print(const tu_tally *t, const char *title);

#endif
