/* opencl/engine_fuse: anchor and reduction groups for the OpenCL engine.
 *
 * - Conv that the op would run with its direct kernel + epilogue (+ pool):
 *   ONE generated kernel computes the convolution and applies the epilogue
 *   to each output element in registers; a MaxPool / AveragePool ending
 *   the group goes into that kernel too (a work-item per pooled element)
 *   when nothing else needs the epilogue's result and its windows do not
 *   overlap, else it is the pool's device op after it;
 * - MatMul, Gemm and pointwise Conv when the SGEMM is kiln's kernel: ONE
 *   kernel, kiln's SGEMM with the epilogue printed into its store; a Conv
 *   through im2col: the im2col kernel writing the column matrix into the
 *   variant's scratch (codegen.h), then that SGEMM reading it;
 * - other anchors (anything on CLBlast, KILN_CL_GEMM_EPILOGUE=0): the node's
 *   device op writes the anchor's output, then ONE generated epilogue kernel
 *   (every epilogue node of the group) reads it; a Conv's bias or a Gemm's C
 *   is added by that kernel, not prefilled by the op, when nothing else
 *   sees the op's output;
 * - reduction groups of two or more nodes: ONE generated kernel, a
 *   work-group per reduced element, or a work-item per row (short rows,
 *   many interleaved rows, and on CPU devices enough rows: opencl/codegen
 *   kiln_cl_codegen_reduce).
 * Single-node reductions stay with opencl/ops (their kernels are the same
 * shape). Anything else is left to the engine's node-by-node lowering. */
#include "opencl/engine_fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/status.h"
#include "opencl/ops.h"

void kiln_cl_fuse_lowering_free(kiln_cl_fuse_lowering *l) {
  for (int k = 0; k < l->n; k++) {
    kiln_free(l->item[k].text);
    l->item[k].text = NULL;
  }
  l->n = 0;
}

/* Value w's concrete type from the spec's shapes; false when unknown. */
static bool ttype_of(const kiln_fuse_spec *sp, int w, kiln_cl_ttype *t) {
  memset(t, 0, sizeof *t);
  if (w < 0) return true; /* absent: dtype UNDEFINED */
  const kiln_vshape *x = &sp->sh->v[w];
  t->dtype = x->dtype;
  t->rank = x->rank;
  if (x->rank < 0 || x->data_dependent) return false;
  for (int d = 0; d < x->rank; d++)
    if (!kiln_dimx_is_const(sp->sh->tab, x->dims[d], &t->dims[d]) || t->dims[d] < 0) return false;
  return true;
}

/* Value w has exactly the domain's (bound) shape. */
static bool is_domain_shaped(const kiln_fuse_spec *sp, int w) {
  kiln_cl_ttype t;
  if (!ttype_of(sp, w, &t) || t.rank != sp->rank) return false;
  for (int d = 0; d < t.rank; d++)
    if (t.dims[d] != sp->shape[d]) return false;
  return true;
}

/* Every value step st writes is one of the spec's stores (pooled stores
 * count for the pool's output). */
static bool writes_covered(const kiln_fuse_spec *sp, const kiln_step *st) {
  for (int w = 0; w < st->n_writes; w++) {
    bool found = false;
    for (int k = 0; k < sp->n_store && !found; k++) found = sp->store[k].value == st->writes[w];
    if (!found) return false;
  }
  return true;
}

/* Some accessor reads value w. */
static bool reads_value(const kiln_fuse_spec *sp, int w) {
  for (int a = 0; a < sp->n_access; a++)
    if (sp->access[a].value == w) return true;
  return false;
}

/* Some store writes value w (a pooled store: the pool's input pv). */
static bool stores_value(const kiln_fuse_spec *sp, int w, int pv) {
  for (int k = 0; k < sp->n_store; k++)
    if ((sp->store[k].pool ? pv : sp->store[k].value) == w) return true;
  return false;
}

static kiln_status decline(bool *ok, const kiln_fuse_spec *sp, const char *why) {
  *ok = false;
  kiln_log(KILN_LOG_DEBUG, "opencl: fused %s group from node %d (%d nodes) lowered node by node: %s",
           kiln_fuse_group_kind_name(sp->kind), sp->nodes[0], sp->n_nodes, why);
  return KILN_OK;
}

/* A codegen refusal becomes a decline (its message logged); out of memory stays an error. */
static kiln_status soft(kiln_status s, bool *ok, const kiln_fuse_spec *sp) {
  if (!s) return KILN_OK;
  if (s == KILN_E_NOMEM) return s;
  char msg[256];
  snprintf(msg, sizeof msg, "%s", kiln_last_error());
  kiln_error_clear();
  return decline(ok, sp, msg);
}

static kiln_status lower_reduce(const kiln_cl_device *dev, const kiln_fuse_spec *sp, kiln_cl_fuse_lowering *out,
                                bool *ok) {
  char name[48];
  snprintf(name, sizeof name, "g%d_red", sp->nodes[0]);
  kiln_cl_fuse_item *it = &out->item[0];
  it->node = -1;
  kiln_status s = kiln_cl_codegen_reduce(sp, dev, name, &it->text, &it->sig);
  if (s) return soft(s, ok, sp);
  out->n = 1;
  if (it->sig.local)
    snprintf(out->how, sizeof out->how, "reduction group in one kernel (a work-group of <= %zu per row)", it->sig.local);
  else snprintf(out->how, sizeof out->how, "reduction group in one kernel (a work-item per row)");
  *ok = true;
  return KILN_OK;
}

/* The anchor's constant inputs as the engine gives them to kiln_cl_op_prepare
 * (kiln_cl_konst_of). */
static void anchor_konst(const kiln_fuse_spec *sp, const kiln_node *n, const kiln_tensor *konst[3]) {
  for (int k = 0; k < 3; k++) konst[k] = kiln_cl_konst_of(sp->g, sp->sh, k < n->n_in ? n->in[k] : -1);
}

/* The anchor's inputs (absent ones zeroed, up to 3) and output as
 * OpenCL-side types; false when one has no static type. */
static bool anchor_types(const kiln_fuse_spec *sp, const kiln_node *n, kiln_cl_ttype in[3], kiln_cl_ttype *out) {
  memset(in, 0, 3 * sizeof *in);
  for (int k = 0; k < n->n_in && k < 3; k++)
    if (!ttype_of(sp, n->in[k], &in[k])) return false;
  return ttype_of(sp, n->out[0], out);
}

static int64_t ttype_numel(const kiln_cl_ttype *t) {
  int64_t ne = 1;
  for (int d = 0; d < t->rank; d++) ne *= t->dims[d];
  return ne;
}

/* An anchor's epilogue that could not be printed into its kernel: the
 * reason logged (debug), the error cleared, *ok false; only running out of
 * memory is an error. src (if any) is freed. */
static kiln_status not_embedded(const char *what, kiln_status s, kiln_cl_src *src, bool *ok) {
  if (src) kiln_cl_src_free(src);
  if (s && s != KILN_E_NOMEM) {
    kiln_log(KILN_LOG_DEBUG, "opencl: %s epilogue not embedded: %s", what, kiln_last_error());
    kiln_error_clear();
    s = KILN_OK;
  }
  *ok = false;
  return s;
}

/* The lowered item of a kernel with its epilogue inside: src's text moves to it. */
static void embedded_item(kiln_cl_fuse_item *it, kiln_cl_kernel_sig *sig, const char *name, int64_t items,
                          kiln_cl_src *src) {
  snprintf(sig->name, sizeof sig->name, "%s", name);
  sig->n_items = items;
  it->node = -1;
  it->text = src->text;
  it->sig = *sig;
}

/* Why the group's pooling cannot go into the anchor's kernel as far as the
 * spec says (a value other than the pooled output is stored: the epilogue's
 * result, or one on the way, is needed outside the group), else NULL;
 * buf holds the text. */
static const char *pool_spec_why(const kiln_fuse_spec *sp, char *buf, size_t size) {
  for (int k = 0; k < sp->n_store; k++) {
    if (sp->store[k].pool) continue;
    const char *nm = sp->g->values[sp->store[k].value].name;
    snprintf(buf, size, "'%s' is needed outside the group too (the group stores it)", nm ? nm : "?");
    return buf;
  }
  return NULL;
}

static void pool_kept(const kiln_fuse_spec *sp, const char *why) {
  kiln_log(KILN_LOG_DEBUG, "opencl: fused anchor group from node %d: its %s stays its own device op: %s", sp->nodes[0],
           sp->g->nodes[sp->pool].op_type, why);
}

/* The direct convolution with the epilogue in it (pooled: and the group's
 * pooling, its pooled output the kernel's last buffer); *ok false when the
 * conv goes another way (pooled: or the pooling cannot go in, logged). */
static kiln_status conv_fused(const kiln_cl_device *dev, const kiln_fuse_spec *sp, int pool_value, bool pooled,
                              kiln_cl_fuse_item *it, bool *ok) {
  *ok = false;
  const kiln_graph *g = sp->g;
  const kiln_node *n = &g->nodes[sp->anchor];
  if (n->n_in > 3 || n->n_out != 1) return KILN_OK;
  kiln_cl_ttype in[3], outt[1];
  const kiln_tensor *konst[3];
  if (!anchor_types(sp, n, in, outt)) return KILN_OK;
  anchor_konst(sp, n, konst);
  kiln_cl_conv_pool pool;
  memset(&pool, 0, sizeof pool);
  if (pooled) {
    pool.node = &g->nodes[sp->pool];
    if (pool.node->n_out < 1 || !ttype_of(sp, pool.node->out[0], &pool.out)) {
      pool_kept(sp, "its output has no static type");
      return KILN_OK;
    }
  }
  kiln_cl_kernel_sig sig;
  memset(&sig, 0, sizeof sig);
  bool bias = n->n_in > 2 && n->in[2] >= 0;
  for (int k = 0; k < (bias ? 3 : 2); k++) {
    sig.args[sig.n_args++] = (kiln_cl_sig_arg){false, -1, n->in[k], KILN_F32, ttype_numel(&in[k])};
  }
  char *params = NULL, *body = NULL;
  kiln_status s = pooled ? kiln_cl_codegen_epilogue_pooled(sp, dev, &params, &body, &sig)
                         : kiln_cl_codegen_epilogue_parts(sp, dev, pool_value, &params, &body, &sig);
  if (s) return not_embedded(pooled ? "pooled conv" : "conv", s, NULL, ok);
  kiln_cl_src src = {0};
  char name[48];
  snprintf(name, sizeof name, "g%d_c", sp->nodes[0]);
  int64_t items = 0;
  s = kiln_cl_src_puts(&src, kiln_cl_codegen_prelude());
  if (!s)
    s = kiln_cl_conv_direct_fused(dev, g, n, in, outt, konst, name, params, body, pooled ? &pool : NULL, &src, &items,
                                  ok);
  kiln_free(params);
  kiln_free(body);
  if (!s && !*ok && pooled) pool_kept(sp, pool.why);
  if (s || !*ok) return not_embedded("conv", s, &src, ok);
  if (pooled) /* (the pooled store is the spec's only one: index 0) */
    sig.args[sig.n_args++] = (kiln_cl_sig_arg){true, 0, pool.node->out[0], KILN_F32, ttype_numel(&pool.out)};
  embedded_item(it, &sig, name, items, &src);
  return KILN_OK;
}

/* Whether a MatMul / Gemm / Conv anchor's epilogue may go into kiln's
 * SGEMM kernel's store (gemm_fused): KILN_CL_GEMM_EPILOGUE is not 0 and no
 * accessor reads the anchor's output x (the epilogue sees the anchor only
 * as its ANCHOR expression, in registers). Whether the GEMM is kiln's and
 * the node's shape class is kiln_cl_gemm_fused's to say. */
bool kiln_cl_fuse_store_epilogue_ok(const kiln_fuse_spec *sp, int x) {
  const char *e = getenv("KILN_CL_GEMM_EPILOGUE");
  if (e && !strcmp(e, "0")) return false;
  return x >= 0 && !reads_value(sp, x);
}

/* kiln's SGEMM kernel with the epilogue in its store, it[0] (an im2col
 * conv: it[0] the im2col kernel writing the column matrix into the
 * variant's scratch, it[1] the SGEMM reading it); *n_items the items made,
 * 0 when the anchor goes another way (CLBlast, KILN_CL_GEMM_EPILOGUE=0, ...). */
static kiln_status gemm_fused(const kiln_cl_device *dev, const kiln_fuse_spec *sp, int pool_value,
                              kiln_cl_fuse_item it[2], int *n_items) {
  *n_items = 0;
  const kiln_graph *g = sp->g;
  const kiln_node *n = &g->nodes[sp->anchor];
  if (n->n_in > 3 || n->n_in < 2 || n->n_out != 1) return KILN_OK;
  kiln_cl_ttype in[3], outt[1];
  const kiln_tensor *konst[3];
  if (!anchor_types(sp, n, in, outt)) return KILN_OK;
  anchor_konst(sp, n, konst);
  /* the node's inputs come first in the signature, in the kernel's order
     (known after printing): reserve their slots, then the epilogue's */
  kiln_cl_kernel_sig sig;
  memset(&sig, 0, sizeof sig);
  int nin = n->n_in > 2 && n->in[2] >= 0 ? 3 : 2;
  sig.n_args = nin;
  char *params = NULL, *body = NULL;
  bool ok = false;
  kiln_status s = kiln_cl_codegen_epilogue_parts(sp, dev, pool_value, &params, &body, &sig);
  if (s) return not_embedded("GEMM", s, NULL, &ok);
  kiln_cl_src src = {0}, csrc = {0};
  char name[48], cname[52];
  snprintf(name, sizeof name, "g%d_mm", sp->nodes[0]);
  snprintf(cname, sizeof cname, "g%d_col", sp->nodes[0]);
  int64_t items = 0;
  int vals[3], nv = 0;
  kiln_cl_gemm_cols cols = {cname, &csrc, 0, 0};
  s = kiln_cl_src_puts(&src, kiln_cl_codegen_prelude());
  if (!s) s = kiln_cl_gemm_fused(dev, g, n, in, outt, konst, name, params, body, &src, vals, &nv, &items, &cols, &ok);
  kiln_free(params);
  kiln_free(body);
  if (!s && ok && nv != nin) { /* a Gemm without C / Conv without bias or with columns: close the gap */
    for (int a = nv; a + (nin - nv) < sig.n_args; a++) sig.args[a] = sig.args[a + (nin - nv)];
    sig.n_args -= nin - nv;
  }
  if (s || !ok) {
    kiln_cl_src_free(&csrc);
    return not_embedded("GEMM", s, &src, &ok);
  }
  for (int a = 0; a < nv; a++) {
    kiln_cl_ttype t;
    ttype_of(sp, vals[a], &t);
    sig.args[a] = (kiln_cl_sig_arg){false, -1, vals[a], KILN_F32, ttype_numel(&t)};
  }
  if (cols.floats) { /* X -> the columns (scratch), then the SGEMM reads them */
    kiln_cl_kernel_sig cs;
    memset(&cs, 0, sizeof cs);
    cs.n_args = 1;
    cs.args[0] = (kiln_cl_sig_arg){false, -1, n->in[0], KILN_F32, ttype_numel(&in[0])};
    cs.scratch = sig.scratch = cols.floats;
    embedded_item(&it[(*n_items)++], &cs, cname, cols.items, &csrc);
  }
  embedded_item(&it[(*n_items)++], &sig, name, items, &src);
  return KILN_OK;
}

static kiln_status lower_anchor(const kiln_cl_device *dev, const kiln_fuse_spec *sp, kiln_cl_fuse_lowering *out,
                                bool *ok) {
  const kiln_graph *g = sp->g;
  const kiln_node *an = &g->nodes[sp->anchor];
  const char *op = an->op_type;
  if ((*an->domain && strcmp(an->domain, "ai.onnx")) ||
      (strcmp(op, "Conv") && strcmp(op, "MatMul") && strcmp(op, "Gemm")))
    return decline(ok, sp, "the anchor is not Conv, MatMul or Gemm");
  int x = an->n_out >= 1 ? an->out[0] : -1;
  if (x < 0 || sp->sh->v[x].dtype != KILN_F32 || !is_domain_shaped(sp, x))
    return decline(ok, sp, "the domain is not the anchor's float32 output");
  int pv = -1;
  if (sp->pool >= 0) {
    const kiln_node *pn = &g->nodes[sp->pool];
    pv = pn->n_in >= 1 ? pn->in[0] : -1;
    if (pv < 0 || !is_domain_shaped(sp, pv)) return decline(ok, sp, "the pooled value is not the domain");
  }
  if (pv >= 0 && reads_value(sp, pv)) return decline(ok, sp, "it reads the pooled value");
  int k = 0;
  bool fused = false, pooled = false;
  if (!strcmp(op, "Conv") && !reads_value(sp, x)) {
    char buf[160];
    const char *why = sp->pool >= 0 ? pool_spec_why(sp, buf, sizeof buf) : NULL;
    if (sp->pool >= 0 && why) pool_kept(sp, why);
    if (sp->pool >= 0 && !why) {
      kiln_status s = conv_fused(dev, sp, pv, true, &out->item[k], &pooled);
      if (s) return s;
      fused = pooled;
    }
    if (!fused) {
      kiln_status s = conv_fused(dev, sp, pv, false, &out->item[k], &fused);
      if (s) return s;
    }
    if (fused) {
      k++;
      if (pooled)
        snprintf(out->how, sizeof out->how, "direct Conv with the epilogue and the %s in one kernel",
                 g->nodes[sp->pool].op_type);
      else snprintf(out->how, sizeof out->how, "direct Conv with the epilogue in one kernel");
    }
  }
  if (!fused && kiln_cl_fuse_store_epilogue_ok(sp, x)) {
    int made = 0;
    kiln_status s = gemm_fused(dev, sp, pv, &out->item[k], &made);
    if (s) return s;
    fused = made > 0;
    k += made;
    if (made == 1)
      snprintf(out->how, sizeof out->how, "%s in kiln's SGEMM with the epilogue in its store, one kernel", op);
    else if (made)
      snprintf(out->how, sizeof out->how, "im2col kernel + Conv in kiln's SGEMM with the epilogue in its store");
  }
  if (!fused) {
    /* the op's bias / C goes to the epilogue kernel (no prefill, one pass
       less) when nothing but the epilogue's ANCHOR sees the op's output */
    kiln_cl_ttype in[3], outt[1];
    char expr[192];
    kiln_cl_anchor_add add = {an->n_in > 2 ? an->in[2] : -1, 0, expr};
    bool split = !reads_value(sp, x) && !stores_value(sp, x, pv) && an->n_in <= 3 && anchor_types(sp, an, in, outt) &&
                 kiln_cl_op_addend(dev, g, an, in, outt, "anb_", "gid", expr, sizeof expr);
    if (split) add.numel = ttype_numel(&in[2]);
    out->item[k].node = sp->anchor;
    out->item[k].without_bias = split;
    out->item[k++].text = NULL;
    char name[48];
    snprintf(name, sizeof name, "g%d_epi", sp->nodes[0]);
    kiln_cl_fuse_item *it = &out->item[k];
    it->node = -1;
    out->n = k;
    kiln_status s = kiln_cl_codegen_epilogue(sp, dev, name, x, split ? &add : NULL, pv, &it->text, &it->sig);
    if (s) return soft(s, ok, sp);
    k++;
    if (split)
      snprintf(out->how, sizeof out->how, "%s device op without its %s + one epilogue kernel adding it", op,
               strcmp(op, "Conv") ? "C" : "bias");
    else snprintf(out->how, sizeof out->how, "%s device op + one epilogue kernel", op);
  }
  if (sp->pool >= 0 && !pooled) {
    out->item[k].node = sp->pool;
    out->item[k++].text = NULL;
  }
  out->n = k;
  *ok = true;
  return KILN_OK;
}

kiln_status kiln_cl_fuse_lower(const kiln_cl_device *dev, const kiln_fuse_spec *sp, const kiln_step *st,
                               kiln_cl_fuse_lowering *out, bool *ok) {
  memset(out, 0, sizeof *out);
  *ok = false;
  if (!sp || !sp->bound || sp->n_nodes < 2) return KILN_OK;
  if (sp->kind != KILN_FUSE_G_ANCHOR && sp->kind != KILN_FUSE_G_REDUCE) return KILN_OK;
  if (sp->n_alias) return decline(ok, sp, "it has view outputs (aliases)");
  if (!writes_covered(sp, st)) return decline(ok, sp, "a value it writes is not one of its stores");
  for (int k = 0; k < sp->n_store; k++) /* one kernel reads and writes: never the same buffer */
    if (reads_value(sp, sp->store[k].value)) return decline(ok, sp, "it reads a value it stores");
  kiln_status s = sp->kind == KILN_FUSE_G_REDUCE ? lower_reduce(dev, sp, out, ok) : lower_anchor(dev, sp, out, ok);
  if (s || !*ok) {
    kiln_cl_fuse_lowering_free(out);
    *ok = false;
  }
  return s;
}
