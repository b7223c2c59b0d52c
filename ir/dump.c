/* ir/dump: KILN_DUMP=dir — Graphviz DOT writer, the dump directory and its
 * file names (a process-wide stem registry behind a spinlock). */
#include "ir/dump.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "ir/alloc.h"

/* Longest stem / extension kiln_dump_open puts in a file name. */
#define DUMP_NAME_MAX 200
#define DUMP_EXT_MAX 40

/* ---- text helpers ---- */

/* Bytes of the valid UTF-8 sequence at s (2..4), or 0 when it is not one. */
static int utf8_len(const unsigned char *s) {
  unsigned c = s[0];
  int n;
  unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (int k = 2; k < n; k++)
    if (s[k] < 0x80 || s[k] > 0xBF) return 0;
  return n;
}

/* Writes s inside a DOT double-quoted string: '"' and '\' escaped, a
 * newline as the label line break "\n", other control bytes and invalid
 * UTF-8 as '?'. */
static void put_esc(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  while (*p) {
    unsigned c = *p;
    if (c == '"' || c == '\\') {
      fputc('\\', f);
      fputc((int)c, f);
      p++;
    } else if (c == '\n') {
      fputs("\\n", f);
      p++;
    } else if (c < 0x20 || c == 0x7F) {
      fputc('?', f);
      p++;
    } else if (c < 0x80) {
      fputc((int)c, f);
      p++;
    } else {
      int n = utf8_len(p);
      if (n) {
        fwrite(p, 1, (size_t)n, f);
        p += n;
      } else {
        fputc('?', f);
        p++;
      }
    }
  }
}

/* Appends printf-formatted text to buf (size bytes, *len used), truncating. */
static void appendf(char *buf, size_t size, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void appendf(char *buf, size_t size, size_t *len, const char *fmt, ...) {
  if (*len + 1 >= size) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, size - *len, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  *len += (size_t)n < size - *len ? (size_t)n : size - *len - 1;
}

/* "dtype [d0,d1,...]" of value v: inferred (sh) or declared. */
static void type_text(const kiln_graph *g, const kiln_shapes *sh, int v, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = 0;
  const kiln_value *val = &g->values[v];
  if (sh && v < sh->n) {
    const kiln_vshape *x = &sh->v[v];
    appendf(buf, size, &len, "%s", x->dtype == KILN_UNDEFINED ? "?" : kiln_dtype_name(x->dtype));
    if (x->rank < 0) {
      appendf(buf, size, &len, " [?]");
    } else {
      appendf(buf, size, &len, " [");
      for (int d = 0; d < x->rank; d++) {
        char b[96];
        appendf(buf, size, &len, "%s%s", d ? "," : "",
                x->dims[d] == KILN_DIMX_NONE ? "?" : kiln_dimx_str(sh->tab, x->dims[d], b, sizeof b));
      }
      appendf(buf, size, &len, "]");
    }
    if (x->data_dependent) appendf(buf, size, &len, " data-dependent");
    return;
  }
  if (val->init) {
    const kiln_tensor *t = val->init;
    appendf(buf, size, &len, "%s [", kiln_dtype_name(t->dtype));
    for (int d = 0; d < t->rank; d++) appendf(buf, size, &len, "%s%" PRId64, d ? "," : "", t->dims[d]);
    appendf(buf, size, &len, "]");
    return;
  }
  const kiln_type *ty = &val->type;
  switch (ty->kind) {
  case KILN_TYPE_SEQUENCE: appendf(buf, size, &len, "sequence"); return;
  case KILN_TYPE_MAP: appendf(buf, size, &len, "map"); return;
  case KILN_TYPE_OPTIONAL: appendf(buf, size, &len, "optional"); return;
  case KILN_TYPE_SPARSE: appendf(buf, size, &len, "sparse "); break;
  default: break;
  }
  appendf(buf, size, &len, "%s", ty->dtype == KILN_UNDEFINED ? "?" : kiln_dtype_name(ty->dtype));
  if (ty->rank < 0 || ty->rank > KILN_MAX_RANK) {
    appendf(buf, size, &len, " [?]");
    return;
  }
  appendf(buf, size, &len, " [");
  for (int d = 0; d < ty->rank; d++) {
    const kiln_dim *dm = &ty->dims[d];
    if (dm->value >= 0) appendf(buf, size, &len, "%s%" PRId64, d ? "," : "", dm->value);
    else appendf(buf, size, &len, "%s%s", d ? "," : "", dm->param && *dm->param ? dm->param : "?");
  }
  appendf(buf, size, &len, "]");
}

/* " = a, b" for a constant of at most 4 elements, else "". */
static void const_text(const kiln_tensor *t, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = 0;
  if (!t || !t->data || t->numel < 1 || t->numel > 4 || !kiln_dtype_supported(t->dtype) || t->dtype == KILN_C64 ||
      t->dtype == KILN_C128)
    return;
  appendf(buf, size, &len, " =");
  for (int64_t i = 0; i < t->numel; i++) {
    if (kiln_dtype_is_float(t->dtype)) appendf(buf, size, &len, "%s %.6g", i ? "," : "", kiln_get_f(t, i));
    else appendf(buf, size, &len, "%s %" PRId64, i ? "," : "", kiln_get_i(t, i));
  }
}

/* ---- DOT ---- */

kiln_status kiln_dump_dot(const kiln_graph *g, const kiln_shapes *sh, const int *alias_of, const char *title,
                          FILE *f) {
  if (!g || !f) return kiln_fail(KILN_E_INTERNAL, "kiln_dump_dot: no graph or no file");
  char ty[1024], kv[160], lbl[256];
  fputs("digraph kiln {\n  graph [label=\"", f);
  put_esc(f, title ? title : g->name);
  fputs("\", labelloc=t, fontname=\"Helvetica\", rankdir=TB];\n", f);
  fputs("  node [fontname=\"Helvetica\", fontsize=10];\n", f);
  fputs("  edge [fontname=\"Helvetica\", fontsize=8, arrowsize=0.6];\n", f);
  /* nodes: boxes */
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    fprintf(f, "  n%d [shape=box, style=\"rounded,filled\", fillcolor=\"#dce6f5\", label=\"", i);
    put_esc(f, kiln_node_label(g, n, lbl, sizeof lbl));
    fputs("\\n", f);
    if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx")) {
      put_esc(f, n->domain);
      fputs("::", f);
    }
    put_esc(f, n->op_type);
    fputs("\"];\n", f);
  }
  /* values: small ellipses; constants as compact notes (no data drawn) */
  for (int v = 0; v < g->n_values; v++) {
    const kiln_value *val = &g->values[v];
    bool is_const = val->init && !val->is_input;
    bool view = alias_of && alias_of[v] >= 0 && alias_of[v] < g->n_values;
    type_text(g, sh, v, ty, sizeof ty);
    const char *fill = val->is_output ? "#fbd9a8" : val->is_input ? "#c8ecc8" : is_const ? "#eeeeee" : NULL;
    fprintf(f, "  v%d [shape=%s, fontsize=%d", v, is_const ? "note" : "ellipse", is_const ? 7 : 8);
    if (fill || view)
      fprintf(f, ", style=\"%s%s%s\"", fill ? "filled" : "", fill && view ? "," : "", view ? "dashed" : "");
    if (fill) fprintf(f, ", fillcolor=\"%s\"", fill);
    if (val->is_output) fputs(", peripheries=2", f);
    if (!val->is_input && !val->is_output) fputs(", margin=\"0.04,0.02\", height=0.3", f);
    fputs(", label=\"", f);
    put_esc(f, val->name);
    fputs("\\n", f);
    put_esc(f, ty);
    if (is_const) {
      const_text(val->init, kv, sizeof kv);
      put_esc(f, kv);
    } else if (val->init) {
      fputs(" (default given)", f);
    }
    fputs("\"];\n", f);
  }
  /* edges: value -> reader, writer -> value */
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && n->in[k] < g->n_values) fprintf(f, "  v%d -> n%d;\n", n->in[k], i);
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0 && n->out[k] < g->n_values) fprintf(f, "  n%d -> v%d;\n", i, n->out[k]);
  }
  /* views: a dashed edge to the value whose storage they read */
  if (alias_of)
    for (int v = 0; v < g->n_values; v++)
      if (alias_of[v] >= 0 && alias_of[v] < g->n_values)
        fprintf(f,
                "  v%d -> v%d [style=dashed, color=\"#777777\", fontcolor=\"#777777\", label=\"alias of\", "
                "constraint=false];\n",
                v, alias_of[v]);
  fputs("}\n", f);
  if (ferror(f)) return kiln_fail(KILN_E_INTERNAL, "writing the DOT dump of graph '%s' failed", g->name ? g->name : "");
  return KILN_OK;
}

/* ---- the dump directory ---- */

static atomic_flag warned_open = ATOMIC_FLAG_INIT, warned_write = ATOMIC_FLAG_INIT;

/* Logs a warning the first time it is called with that flag while warnings
 * are shown (KILN_LOG=warn or more). */
static void warn_once(atomic_flag *flag, const char *what, const char *path, int err) {
  if (kiln_log_level() < KILN_LOG_WARN || atomic_flag_test_and_set(flag)) return;
  char eb[128];
  if (!err || strerror_r(err, eb, sizeof eb)) snprintf(eb, sizeof eb, "error %d", err);
  kiln_log(KILN_LOG_WARN, "KILN_DUMP: %s %s: %s (further dump problems are not reported)", what, path,
           err ? eb : "write error");
}

bool kiln_dump_enabled(void) {
  const char *d = getenv("KILN_DUMP");
  return d && *d;
}

/* Copies s into out (at most max bytes + NUL), every byte outside
 * [A-Za-z0-9_.-] replaced by '_'. Returns the length. */
static size_t sanitize(const char *s, char *out, size_t max) {
  size_t n = 0;
  for (; s && s[n] && n < max; n++) {
    char c = s[n];
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-';
    out[n] = ok ? c : '_';
  }
  out[n] = 0;
  return n;
}

/* mkdir -p dir; returns 0 or the first errno that was not EEXIST. */
static int make_dirs(const char *dir) {
  size_t len = strlen(dir);
  char *p = kiln_malloc(len + 1);
  if (!p) return ENOMEM;
  memcpy(p, dir, len + 1);
  int err = 0;
  for (size_t i = 1; i <= len; i++) {
    if (p[i] != '/' && p[i] != 0) continue;
    if (p[i - 1] == '/') continue; /* "a//b" */
    char c = p[i];
    p[i] = 0;
    if (mkdir(p, 0777) && errno != EEXIST && !err) err = errno;
    p[i] = c;
  }
  kiln_free(p);
  return err;
}

kiln_status kiln_dump_open(const char *stem, const char *ext, FILE **f) {
  if (f) *f = NULL;
  if (!stem || !f) return kiln_fail(KILN_E_INTERNAL, "kiln_dump_open: no stem or no file");
  const char *dir = getenv("KILN_DUMP");
  if (!dir || !*dir) return KILN_OK;
  size_t dl = strlen(dir);
  char *path = kiln_malloc(dl + DUMP_NAME_MAX + DUMP_EXT_MAX + 8);
  if (!path) {
    warn_once(&warned_open, "cannot open a file in", dir, ENOMEM);
    return KILN_OK;
  }
  memcpy(path, dir, dl);
  size_t n = dl;
  if (!dl || path[dl - 1] != '/') path[n++] = '/';
  size_t sl = sanitize(stem, path + n, DUMP_NAME_MAX);
  if (!sl) sl = sanitize("graph", path + n, DUMP_NAME_MAX);
  n += sl;
  if (ext && *ext) {
    path[n++] = '.';
    n += sanitize(ext, path + n, DUMP_EXT_MAX);
  }
  path[n] = 0;
  int derr = make_dirs(dir);
  *f = fopen(path, "w");
  if (!*f) warn_once(&warned_open, "cannot write", path, derr ? derr : errno);
  kiln_free(path);
  return KILN_OK;
}

bool kiln_dump_close(FILE *f, const char *stem, const char *ext) {
  if (!f) return true;
  bool ok = fflush(f) == 0 && !ferror(f);
  int err = ok ? 0 : errno;
  if (fclose(f)) {
    if (ok) err = errno;
    ok = false;
  }
  if (!ok) {
    char name[DUMP_NAME_MAX + DUMP_EXT_MAX + 2];
    snprintf(name, sizeof name, "%s.%s", stem ? stem : "", ext ? ext : "");
    warn_once(&warned_write, "error writing", name, err);
  }
  return ok;
}

void kiln_dump_graph(const char *stem, const char *what, const kiln_graph *g, const kiln_shapes *sh,
                     const int *alias_of, const char *title) {
  if (!kiln_dump_enabled() || !stem || !g) return;
  char saved[1024], ext[DUMP_EXT_MAX];
  snprintf(saved, sizeof saved, "%s", kiln_last_error());
  snprintf(ext, sizeof ext, "%s.dot", what ? what : "graph");
  FILE *f = NULL;
  kiln_dump_open(stem, ext, &f);
  if (f) {
    if (kiln_dump_dot(g, sh, alias_of, title, f)) warn_once(&warned_write, "error writing", ext, errno);
    kiln_dump_close(f, stem, ext);
  }
  kiln_error_set_message(saved);
}

/* ---- stems: unique per process ---- */

/* Open-addressed set of the 64-bit FNV-1a hashes of the stems handed out
 * (0 marks a free slot), behind a spinlock: the section is a few probes. */
static atomic_flag stem_lock = ATOMIC_FLAG_INIT;
static uint64_t *stem_set;
static size_t stem_cap, stem_count;

/* Frees the registry when the library is unloaded (the plugin is dlclosed
 * by its host; without this the set would outlive its only pointer). */
__attribute__((destructor)) static void stem_set_free(void) {
  kiln_free(stem_set);
  stem_set = NULL;
  stem_cap = stem_count = 0;
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h ? h : 1;
}

/* True when h is in the set; else inserts it (when memory allows). */
static bool stem_seen_or_add(uint64_t h) {
  if (stem_cap) {
    for (size_t i = h & (stem_cap - 1);; i = (i + 1) & (stem_cap - 1)) {
      if (stem_set[i] == h) return true;
      if (!stem_set[i]) break;
    }
  }
  if (2 * (stem_count + 1) > stem_cap) { /* grow to keep the load <= 1/2 */
    size_t cap = stem_cap ? 2 * stem_cap : 64;
    uint64_t *set = kiln_calloc(cap, sizeof *set);
    if (!set) return false; /* unregistered: still a fresh stem now */
    for (size_t j = 0; j < stem_cap; j++)
      if (stem_set[j]) {
        size_t i = stem_set[j] & (cap - 1);
        while (set[i]) i = (i + 1) & (cap - 1);
        set[i] = stem_set[j];
      }
    kiln_free(stem_set);
    stem_set = set;
    stem_cap = cap;
  }
  size_t i = h & (stem_cap - 1);
  while (stem_set[i]) i = (i + 1) & (stem_cap - 1);
  stem_set[i] = h;
  stem_count++;
  return false;
}

const char *kiln_dump_stem(const char *name, char *buf, size_t size) {
  if (!buf || !size) return buf;
  if (size < 16) {
    snprintf(buf, size, "graph");
    return buf;
  }
  char base[KILN_DUMP_STEM_MAX];
  size_t cut = size - 9 < KILN_DUMP_STEM_MAX - 8 ? size - 9 : KILN_DUMP_STEM_MAX - 8;
  if (!sanitize(name && *name ? name : "graph", base, cut)) snprintf(base, sizeof base, "graph");
  while (atomic_flag_test_and_set_explicit(&stem_lock, memory_order_acquire)) {
  }
  snprintf(buf, size, "%s", base);
  for (unsigned long k = 2; stem_seen_or_add(fnv1a(buf)) && k < 10000000ul; k++)
    snprintf(buf, size, "%s-%lu", base, k);
  atomic_flag_clear_explicit(&stem_lock, memory_order_release);
  return buf;
}
