/* ir/observe: the observer object — records, the engine hooks, the map
 * from a rewritten graph back to the graph as given, the run bracket and
 * the Caffe2 line writers (ir/observe.h). */
#include "ir/observe.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/alloc.h"

struct kiln_obs {
  const kiln_graph *g;
  kiln_obs_options opt;
  char *dump_file;
  int n;
  kiln_obs_record *rec;
  int *first;  /* per node: index into slot_of (n_nodes + 1 entries) */
  int *slot_of; /* first[node] + out -> record, -1 for an omitted output */
  int *by_value; /* original value -> record, -1 */
  struct named { const char *name; int rec; } *by_name; /* sorted by name */
  uint64_t run_id, runs;
  uint64_t id;
};

static _Atomic uint64_t next_id = 1;

static _Thread_local kiln_obs *run_current;

static int cmp_named(const void *a, const void *b) {
  return strcmp(((const struct named *)a)->name, ((const struct named *)b)->name);
}

kiln_status kiln_obs_new(const kiln_graph *g, const kiln_obs_options *opts, kiln_obs **out) {
  *out = NULL;
  kiln_obs *o = kiln_calloc(1, sizeof *o);
  if (!o) return kiln_fail(KILN_E_NOMEM, "out of memory creating an observer");
  o->g = g;
  o->id = next_id++;
  if (opts) o->opt = *opts;
  if (!o->opt.delim) o->opt.delim = ' ';
  if (o->opt.nbins < 0) {
    kiln_free(o);
    return kiln_fail(KILN_E_INVALID_VALUE, "observer: %d histogram bins", o->opt.nbins);
  }
  kiln_status s = KILN_OK;
  if (o->opt.dump_file) {
    if (!(o->dump_file = kiln_strdup(o->opt.dump_file))) s = kiln_fail(KILN_E_NOMEM, "out of memory");
    o->opt.dump_file = o->dump_file;
  }
  int total = 0;
  for (int i = 0; i < g->n_nodes; i++) total += g->nodes[i].n_out;
  o->first = kiln_calloc((size_t)g->n_nodes + 1, sizeof *o->first);
  o->slot_of = kiln_calloc((size_t)total + 1, sizeof *o->slot_of);
  o->by_value = kiln_calloc((size_t)g->n_values + 1, sizeof *o->by_value);
  o->rec = kiln_calloc((size_t)total + 1, sizeof *o->rec);
  if (!s && (!o->first || !o->slot_of || !o->by_value || !o->rec))
    s = kiln_fail(KILN_E_NOMEM, "out of memory creating an observer");
  for (int v = 0; !s && v < g->n_values; v++) o->by_value[v] = -1;
  int k = 0;
  for (int i = 0; !s && i < g->n_nodes; i++) {
    const kiln_node *nd = &g->nodes[i];
    o->first[i] = k;
    for (int j = 0; j < nd->n_out && !s; j++, k++) {
      o->slot_of[k] = -1;
      int v = nd->out[j];
      if (v < 0) continue;
      kiln_obs_record *r = &o->rec[o->n];
      r->node = i;
      r->output = j;
      r->value = v;
      r->op_type = nd->op_type;
      r->name = g->values[v].name;
      r->folded_into = -1;
      kiln_obs_partial_init(&r->cur);
      kiln_obs_partial_init(&r->total);
      s = kiln_obs_hist_init(&r->hist, o->opt.nbins);
      o->slot_of[k] = o->n;
      o->by_value[v] = o->n;
      o->n++;
    }
  }
  if (!s) {
    o->first[g->n_nodes] = k;
    if (!(o->by_name = kiln_calloc((size_t)o->n + 1, sizeof *o->by_name)))
      s = kiln_fail(KILN_E_NOMEM, "out of memory creating an observer");
  }
  if (!s) {
    for (int i = 0; i < o->n; i++) o->by_name[i] = (struct named){o->rec[i].name, i};
    qsort(o->by_name, (size_t)o->n, sizeof *o->by_name, cmp_named);
  }
  if (s) {
    kiln_obs_free(o);
    return s;
  }
  *out = o;
  return KILN_OK;
}

void kiln_obs_free(kiln_obs *o) {
  if (!o) return;
  if (run_current == o) run_current = NULL;
  for (int i = 0; o->rec && i < o->n; i++) kiln_obs_hist_free(&o->rec[i].hist);
  kiln_free(o->rec);
  kiln_free(o->first);
  kiln_free(o->slot_of);
  kiln_free(o->by_value);
  kiln_free(o->by_name);
  kiln_free(o->dump_file);
  kiln_free(o);
}

const kiln_obs_options *kiln_obs_opts(const kiln_obs *o) { return &o->opt; }
const kiln_graph *kiln_obs_graph(const kiln_obs *o) { return o->g; }
uint64_t kiln_obs_id(const kiln_obs *o) { return o->id; }
bool kiln_obs_observe_all(const kiln_obs *o) { return o && o->opt.observe_all; }
bool kiln_obs_wants_values(const kiln_obs *o) { return o && o->opt.nbins > 0; }
int kiln_obs_count(const kiln_obs *o) { return o->n; }
uint64_t kiln_obs_runs(const kiln_obs *o) { return o->runs; }

const kiln_obs_record *kiln_obs_record_at(const kiln_obs *o, int i) {
  return i >= 0 && i < o->n ? &o->rec[i] : NULL;
}

int kiln_obs_slot(const kiln_obs *o, int node, int out) {
  if (node < 0 || node >= o->g->n_nodes || out < 0 || out >= o->g->nodes[node].n_out) return -1;
  return o->slot_of[o->first[node] + out];
}

int kiln_obs_slot_by_name(const kiln_obs *o, const char *name) {
  struct named key = {name, -1};
  const struct named *hit = o->n ? bsearch(&key, o->by_name, (size_t)o->n, sizeof key, cmp_named) : NULL;
  return hit ? hit->rec : -1;
}

/* Counts the record's run once per run. */
static kiln_obs_record *touch(kiln_obs *o, int slot) {
  if (!o || slot < 0 || slot >= o->n) return NULL;
  kiln_obs_record *r = &o->rec[slot];
  if (r->last_run != o->run_id || !r->total_runs) {
    r->last_run = o->run_id;
    r->runs++;
    r->total_runs++;
  }
  return r;
}

void kiln_obs_tensor(kiln_obs *o, int slot, const kiln_tensor *t) {
  if (!o || slot < 0 || slot >= o->n || !t) return;
  if (!kiln_dtype_is_float(t->dtype) && !kiln_dtype_is_int(t->dtype)) return;
  kiln_obs_partial p;
  kiln_obs_partial_init(&p);
  kiln_obs_partial_fold(&p, t);
  kiln_obs_record *r = touch(o, slot);
  r->dtype = t->dtype;
  kiln_obs_partial_merge(&r->cur, &p);
  kiln_obs_partial_merge(&r->total, &p);
  if (r->hist.nbins) kiln_obs_hist_add(&r->hist, t);
}

void kiln_obs_summary(kiln_obs *o, int slot, const kiln_obs_partial *p) {
  kiln_obs_record *r = touch(o, slot);
  if (!r || !p) return;
  kiln_obs_partial_merge(&r->cur, p);
  kiln_obs_partial_merge(&r->total, p);
  if (r->hist.nbins) r->hist_missed++;
}

void kiln_obs_set_dtype(kiln_obs *o, int slot, kiln_dtype dt) {
  if (o && slot >= 0 && slot < o->n) o->rec[slot].dtype = dt;
}

void kiln_obs_set_folded(kiln_obs *o, int slot, int into_slot) {
  if (!o || slot < 0 || slot >= o->n) return;
  o->rec[slot].folded_into = into_slot >= 0 && into_slot < o->n && into_slot != slot ? into_slot : -1;
  o->rec[slot].erased = o->rec[slot].folded_into < 0;
}

/* ---- mapping a rewritten graph back ---- */

static bool same_inputs(const kiln_obs *o, const int *canon, const kiln_node *a, const kiln_node *b) {
  if (a->n_in != b->n_in || strcmp(a->op_type, b->op_type) || strcmp(a->domain, b->domain)) return false;
  for (int k = 0; k < a->n_in; k++) {
    int x = a->in[k], y = b->in[k];
    if (x >= 0 && o->by_value[x] >= 0) x = canon[o->by_value[x]];
    if (y >= 0 && o->by_value[y] >= 0) y = canon[o->by_value[y]];
    if (x != y) return false;
  }
  return true;
}

kiln_status kiln_obs_map_graph(kiln_obs *o, const kiln_graph *exec, int *slot_of_value) {
  const kiln_graph *g = o->g;
  bool *alive = kiln_calloc((size_t)o->n + 1, sizeof *alive);
  int *canon = kiln_calloc((size_t)o->n + 1, sizeof *canon);  /* record -> original value it equals */
  int *uses = kiln_calloc((size_t)g->n_values + 1, sizeof *uses);
  int *user = kiln_calloc((size_t)g->n_values + 1, sizeof *user);
  if (!alive || !canon || !uses || !user) {
    kiln_free(alive);
    kiln_free(canon);
    kiln_free(uses);
    kiln_free(user);
    return kiln_fail(KILN_E_NOMEM, "out of memory mapping observed tensors");
  }
  for (int v = 0; v < exec->n_values; v++) {
    int r = kiln_obs_slot_by_name(o, exec->values[v].name);
    slot_of_value[v] = r;
    if (r >= 0) alive[r] = true;
  }
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0) continue;
      uses[v]++;
      user[v] = i;
    }
  for (int r = 0; r < o->n; r++) {
    canon[r] = o->rec[r].value;
    o->rec[r].folded_into = -1;
    o->rec[r].erased = false;
  }
  /* Identity / Dropout and CSE: the erased tensor equals a surviving one. */
  for (int round = 0, changed = 1; changed && round < 32; round++) { /* converges in the graph's depth */
    changed = 0;
    for (int r = 0; r < o->n; r++) {
      if (alive[r] || o->rec[r].folded_into >= 0) continue;
      const kiln_node *nd = &g->nodes[o->rec[r].node];
      int into = -1, eq_value = -1;
      if ((!strcmp(nd->op_type, "Identity") || !strcmp(nd->op_type, "Dropout")) && o->rec[r].output == 0 &&
          nd->n_in > 0 && nd->in[0] >= 0) {
        eq_value = nd->in[0];
        int u = o->by_value[eq_value];
        if (u >= 0) {
          eq_value = canon[u];
          into = alive[u] ? u : o->rec[u].folded_into;
        }
      } else {
        for (int m = 0; m < g->n_nodes && into < 0; m++) {
          const kiln_node *other = &g->nodes[m];
          if (m == o->rec[r].node || other->n_out <= o->rec[r].output || !same_inputs(o, canon, nd, other)) continue;
          int u = kiln_obs_slot(o, m, o->rec[r].output);
          if (u >= 0 && (alive[u] || o->rec[u].folded_into >= 0)) {
            into = alive[u] ? u : o->rec[u].folded_into;
            eq_value = canon[u];
          }
        }
      }
      if (into >= 0 || eq_value >= 0) {
        if (eq_value >= 0 && canon[r] != eq_value) {
          canon[r] = eq_value;
          changed = 1;
        }
        if (into >= 0) {
          o->rec[r].folded_into = into;
          changed = 1;
        }
      }
    }
  }
  /* BN folding, merged Transposes: the first surviving tensor downstream
   * along single-reader links. */
  for (int r = 0; r < o->n; r++) {
    if (alive[r] || o->rec[r].folded_into >= 0) continue;
    int v = o->rec[r].value, into = -1;
    for (int step = 0; step < 64 && v >= 0 && uses[v] == 1 && !g->values[v].is_output; step++) {
      const kiln_node *c = &g->nodes[user[v]];
      int u = c->n_out > 0 && c->out[0] >= 0 ? o->by_value[c->out[0]] : -1;
      if (u < 0) break;
      if (alive[u]) {
        into = u;
        break;
      }
      v = c->out[0];
    }
    o->rec[r].folded_into = into;
    o->rec[r].erased = into < 0;
  }
  kiln_free(alive);
  kiln_free(canon);
  kiln_free(uses);
  kiln_free(user);
  return KILN_OK;
}

/* ---- runs ---- */

void kiln_obs_begin_run(kiln_obs *o) {
  o->run_id++;
  run_current = o;
}

kiln_obs *kiln_obs_run_current(void) { return run_current; }

void kiln_obs_reset(kiln_obs *o) {
  for (int i = 0; i < o->n; i++) {
    kiln_obs_partial_init(&o->rec[i].cur);
    o->rec[i].runs = 0;
  }
}

kiln_status kiln_obs_end_run(kiln_obs *o) {
  if (run_current == o) run_current = NULL;
  o->runs++;
  if (!o->opt.dump_freq || !o->dump_file || o->runs % o->opt.dump_freq) return KILN_OK;
  char name[4096];
  if (!kiln_obs_dump_name(o->dump_file, o->runs / o->opt.dump_freq, name, sizeof name))
    return kiln_fail(KILN_E_INVALID_VALUE, "observer dump file name '%s' is too long", o->dump_file);
  return kiln_obs_dump_and_reset(o, name);
}

const char *kiln_obs_file_name(const char *file, const char *suffix, char *buf, size_t size) {
  const char *slash = strrchr(file, '/'), *dot = strrchr(file, '.');
  size_t stem = dot && (!slash || slash < dot) ? (size_t)(dot - file) : strlen(file);
  int n = snprintf(buf, size, "%.*s_%s%s", (int)stem, file, suffix, file + stem);
  return n < 0 || (size_t)n >= size ? NULL : buf;
}

const char *kiln_obs_dump_name(const char *file, uint64_t k, char *buf, size_t size) {
  char num[32];
  snprintf(num, sizeof num, "%llu", (unsigned long long)k);
  return kiln_obs_file_name(file, num, buf, size);
}

/* ---- writers ---- */

/* The fewest digits that read back to v: a float's shortest form when v is
 * a float, else the double's. */
static const char *num(double v, char *buf) {
  if (isnan(v)) return strcpy(buf, "nan");
  if (isinf(v)) return strcpy(buf, v > 0 ? "inf" : "-inf");
  if ((double)(float)v == v) {
    for (int p = 1; p <= 9; p++) {
      snprintf(buf, 32, "%.*g", p, v);
      if (strtof(buf, NULL) == (float)v) return buf;
    }
  }
  for (int p = 15; p <= 17; p++) {
    snprintf(buf, 32, "%.*g", p, v);
    if (strtod(buf, NULL) == v) return buf;
  }
  return buf;
}

static void head(const kiln_obs *o, FILE *f, const kiln_obs_record *r) {
  char d = o->opt.delim;
  fprintf(f, "%d%c%s%c%d%c%s", r->node, d, r->op_type, d, r->output, d, r->name);
}

void kiln_obs_print_minmax(const kiln_obs *o, FILE *f, bool totals) {
  char a[32], b[32], d = o->opt.delim;
  for (int i = 0; i < o->n; i++) {
    const kiln_obs_record *r = &o->rec[i];
    const kiln_obs_partial *p = totals ? &r->total : &r->cur;
    if (!(totals ? r->total_runs : r->runs)) continue;
    head(o, f, r);
    fprintf(f, "%c%s%c%s\n", d, num(p->min, a), d, num(p->max, b));
  }
}

void kiln_obs_print_hist(const kiln_obs *o, FILE *f) {
  char a[32], b[32], d = o->opt.delim;
  for (int i = 0; i < o->n; i++) {
    const kiln_obs_record *r = &o->rec[i];
    if (!r->hist.nbins || !r->hist.total) continue;
    head(o, f, r);
    fprintf(f, "%c%s%c%s%c%d", d, num(r->hist.lo, a), d, num(r->hist.hi, b), d, r->hist.nbins);
    for (int k = 0; k < r->hist.nbins; k++) fprintf(f, "%c%llu", d, (unsigned long long)r->hist.counts[k]);
    fputc('\n', f);
  }
}

void kiln_obs_print_qparams(const kiln_obs *o, FILE *f, kiln_obs_qmethod m, kiln_obs_qscheme s) {
  char a[32], b[32], c[32], d = o->opt.delim;
  for (int i = 0; i < o->n; i++) {
    const kiln_obs_record *r = &o->rec[i];
    kiln_obs_qparams q;
    double lo, hi;
    if (!r->total_runs || !kiln_obs_record_range(r, m, &lo, &hi)) continue;
    kiln_obs_choose_qparams(lo, hi, s, 8, &q);
    head(o, f, r);
    fprintf(f, "%c%s%c%s%c%s%c%d%c%d\n", d, num(q.min, a), d, num(q.max, b), d, num(q.scale, c), d, (int)q.zero_point,
            d, q.precision);
  }
}

typedef enum { W_MINMAX, W_TOTALS, W_HIST, W_QPARAMS } what_t;

static kiln_status write_file(const kiln_obs *o, const char *path, what_t what, kiln_obs_qmethod m,
                              kiln_obs_qscheme s) {
  static _Atomic unsigned seq;
  if (!path || !*path) return kiln_fail(KILN_E_INVALID_VALUE, "observer: no file name given");
  size_t len = strlen(path) + 64;
  char *tmp = kiln_malloc(len);
  if (!tmp) return kiln_fail(KILN_E_NOMEM, "out of memory");
  snprintf(tmp, len, "%s.tmp.%ld.%u", path, (long)getpid(), seq++);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    kiln_status st = kiln_fail(KILN_E_INVALID_VALUE, "cannot write observer file '%s': %s", path, strerror(errno));
    kiln_free(tmp);
    return st;
  }
  switch (what) {
  case W_MINMAX: kiln_obs_print_minmax(o, f, false); break;
  case W_TOTALS: kiln_obs_print_minmax(o, f, true); break;
  case W_HIST: kiln_obs_print_hist(o, f); break;
  case W_QPARAMS: kiln_obs_print_qparams(o, f, m, s); break;
  }
  bool bad = ferror(f) != 0;
  int err = errno;
  if (fclose(f)) {
    bad = true;
    err = errno;
  }
  if (!bad && rename(tmp, path)) {
    bad = true;
    err = errno;
  }
  if (bad) {
    unlink(tmp);
    kiln_free(tmp);
    return kiln_fail(KILN_E_INVALID_VALUE, "cannot write observer file '%s': %s", path, strerror(err));
  }
  kiln_free(tmp);
  return KILN_OK;
}

kiln_status kiln_obs_write_minmax(const kiln_obs *o, const char *path, bool totals) {
  return write_file(o, path, totals ? W_TOTALS : W_MINMAX, KILN_OBS_MINMAX, KILN_OBS_AFFINE_U8);
}

kiln_status kiln_obs_write_hist(const kiln_obs *o, const char *path) {
  return write_file(o, path, W_HIST, KILN_OBS_MINMAX, KILN_OBS_AFFINE_U8);
}

kiln_status kiln_obs_write_qparams(const kiln_obs *o, const char *path, kiln_obs_qmethod m, kiln_obs_qscheme s) {
  return write_file(o, path, W_QPARAMS, m, s);
}

kiln_status kiln_obs_dump_and_reset(kiln_obs *o, const char *path) {
  kiln_status s = kiln_obs_write_minmax(o, path, false);
  kiln_obs_reset(o);
  return s;
}
