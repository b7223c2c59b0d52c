/* fuse/spec_print: a kernel spec as text, for KILN_DUMP and test failures:
 * one line per accessor, expression, reduction, store and alias. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fuse/fuse_impl.h"
#include "fuse/spec.h"
#include "ir/alloc.h"

typedef struct sbuf {
  char *s;
  size_t len, cap;
  bool oom;
} sbuf;

__attribute__((format(printf, 2, 3))) static void put(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->s && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 1024;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *p = kiln_realloc(b->s, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->s = p;
    b->cap = cap;
  }
}

static void put_dims(sbuf *b, const kiln_fuse_spec *sp, int rank, const kiln_dimx *dims) {
  char buf[512];
  put(b, "%s", kiln_fuse_dims_str(sp->sh->tab, rank, dims, buf, sizeof buf));
}

static void put_access(sbuf *b, const kiln_fuse_spec *sp, int i) {
  const kiln_fuse_access *a = &sp->access[i];
  char buf[256];
  put(b, "  a%d = %s ", i, sp->g->values[a->value].name);
  put_dims(b, sp, sp->sh->v[a->value].rank, sp->sh->v[a->value].dims);
  for (int k = 0; k < a->n_xf; k++) {
    const kiln_fuse_xform *x = &a->xf[k];
    if (x->kind == KILN_FUSE_XF_VIEW) {
      put(b, " | %s", kiln_fuse_node_str(sp->g, x->node, buf, sizeof buf));
      if (sp->g->nodes[x->node].n_out > 1) put(b, ".%d", x->out);
    } else {
      put(b, " | %s ", x->kind == KILN_FUSE_XF_BCAST ? "broadcast" : "reshape");
      put_dims(b, sp, x->rank, x->dims);
    }
  }
  put(b, "%s", a->reduced ? " (reduced index)" : "");
  if (sp->bound) {
    put(b, "\n      map:");
    for (int d = 0; d < a->map.depth; d++) put(b, " %s%s", d ? "<- " : "", kiln_view_str(&a->map.v[d], buf, sizeof buf));
    if (a->pad != 0) put(b, " pad %g", a->pad);
  }
  put(b, "\n");
}

static void put_expr(sbuf *b, const kiln_fuse_spec *sp, int i) {
  const kiln_fuse_expr *e = &sp->expr[i];
  put(b, "  e%d = %s", i, kiln_fuse_op_name(e->op));
  switch (e->op) {
  case KILN_FUSE_LOAD: put(b, " a%d", e->ref); break;
  case KILN_FUSE_REDUCE: put(b, " r%d", e->ref); break;
  case KILN_FUSE_CONST:
    if (kiln_dtype_is_float(e->dtype)) put(b, " %.17g", e->f[0]);
    else put(b, " %lld", (long long)e->i);
    break;
  default:
    for (int k = 0; k < e->n_args; k++) put(b, " e%d", e->args[k]);
    break;
  }
  switch (e->op) { /* attributes */
  case KILN_FUSE_LEAKY_RELU:
  case KILN_FUSE_ELU:
  case KILN_FUSE_THRESHOLDED_RELU:
  case KILN_FUSE_CELU: put(b, " alpha=%g", e->f[0]); break;
  case KILN_FUSE_SELU: put(b, " alpha=%g gamma=%g", e->f[0], e->f[2]); break;
  case KILN_FUSE_HARD_SIGMOID: put(b, " alpha=%g beta=%g", e->f[0], e->f[1]); break;
  case KILN_FUSE_SHRINK: put(b, " lambd=%g bias=%g", e->f[0], e->f[1]); break;
  case KILN_FUSE_ISINF: put(b, " neg=%d pos=%d", (int)(e->i & 1), (int)(e->i >> 1 & 1)); break;
  default: break;
  }
  put(b, " : %s%s", kiln_dtype_name(e->dtype), e->reduced ? " [reduced]" : "");
  if (e->node >= 0) {
    char buf[200];
    put(b, "  ; %s", kiln_fuse_node_str(sp->g, e->node, buf, sizeof buf));
  }
  put(b, "\n");
}

kiln_status kiln_fuse_spec_print(const kiln_fuse_spec *sp, char **out) {
  static const char *const red_names[] = {"sum", "max", "min", "mean", "prod"};
  sbuf b = {0};
  char buf[256];
  *out = NULL;
  put(&b, "group %s, %d node%s:", kiln_fuse_group_kind_name(sp->kind), sp->n_nodes, sp->n_nodes == 1 ? "" : "s");
  for (int i = 0; i < sp->n_nodes; i++) put(&b, " %s", kiln_fuse_node_str(sp->g, sp->nodes[i], buf, sizeof buf));
  put(&b, "\n");
  if (sp->kind == KILN_FUSE_G_OPAQUE) {
    put(&b, "  runs %s as it is\n", kiln_fuse_node_str(sp->g, sp->opaque, buf, sizeof buf));
  } else if (sp->kind != KILN_FUSE_G_VIEW) {
    put(&b, "  domain ");
    put_dims(&b, sp, sp->rank, sp->dims);
    if (sp->n_red) {
      put(&b, " reducing axes {");
      for (int d = 0, first = 1; d < sp->rank; d++)
        if (sp->red_axes[d]) put(&b, "%s%d", first ? "" : ",", d), first = 0;
      put(&b, "}");
    }
    if (sp->bound) put(&b, " = %s", kiln_shape_str(sp->rank, sp->shape, buf, sizeof buf));
    put(&b, "\n");
  }
  if (sp->anchor >= 0) put(&b, "  anchor %s\n", kiln_fuse_node_str(sp->g, sp->anchor, buf, sizeof buf));
  for (int i = 0; i < sp->n_access; i++) put_access(&b, sp, i);
  for (int i = 0; i < sp->n_expr; i++) put_expr(&b, sp, i);
  for (int i = 0; i < sp->n_red; i++)
    put(&b, "  r%d = %s(e%d) over the reduced axes : %s\n", i, red_names[sp->red[i].kind], sp->red[i].arg,
        kiln_dtype_name(sp->red[i].dtype));
  for (int i = 0; i < sp->n_store; i++) {
    const kiln_fuse_store *st = &sp->store[i];
    if (st->pool)
      put(&b, "  store %s <- %s(e%d)\n", sp->g->values[st->value].name,
          kiln_fuse_node_str(sp->g, sp->pool, buf, sizeof buf), st->expr);
    else
      put(&b, "  store %s <- e%d%s\n", sp->g->values[st->value].name, st->expr, st->reduced ? " [reduced]" : "");
    if (sp->bound) {
      put(&b, "      map:");
      for (int d = 0; d < st->map.depth; d++)
        put(&b, " %s%s", d ? "<- " : "", kiln_view_str(&st->map.v[d], buf, sizeof buf));
      put(&b, "\n");
    }
  }
  for (int i = 0; i < sp->n_alias; i++)
    put(&b, "  alias %s = view a%d%s\n", sp->g->values[sp->alias[i].value].name, sp->alias[i].access,
        sp->alias[i].copy ? " (copied: a graph output)" : "");
  if (!sp->bound && sp->kind != KILN_FUSE_G_OPAQUE) put(&b, "  (maps not bound: symbolic dims)\n");
  if (b.oom || !b.s) {
    kiln_free(b.s);
    return kiln_fail(KILN_E_NOMEM, "fuse: out of memory printing a spec");
  }
  *out = b.s;
  return KILN_OK;
}
