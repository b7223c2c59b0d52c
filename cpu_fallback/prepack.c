/* cpu_fallback/prepack: see prepack.h. */
#include "cpu_fallback/prepack.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/kernels.h"
#include "cpu_fallback/nn.h"
#include "cpu_fallback/pwt.h"
#include "cpu_fallback/sgemm.h"
#include "cpu_fallback/wino.h"
#include "ir/alloc.h"

/* Nodes reading value v (each input slot counts). */
static int readers(const kiln_graph *g, int v) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) n += g->nodes[i].in[k] == v;
  return n;
}

kiln_status kiln_cpu_pretranspose(kiln_graph *g, int *count) {
  int done = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_node *n = &g->nodes[i];
    if (strcmp(n->op_type, "Gemm") || (n->domain && *n->domain && strcmp(n->domain, "ai.onnx")) || n->n_in < 2)
      continue;
    kiln_attr *tb = NULL;
    for (int a = 0; a < n->n_attrs; a++)
      if (!strcmp(n->attrs[a].name, "transB")) tb = &n->attrs[a];
    if (!tb || tb->type != KILN_ATTR_INT || tb->i != 1) continue;
    int v = n->in[1];
    if (v < 0) continue;
    kiln_value *val = &g->values[v];
    kiln_tensor *w = val->init;
    if (!w || w->dtype != KILN_F32 || w->rank != 2 || w->strided || val->is_input || val->is_output ||
        readers(g, v) != 1)
      continue;
    int64_t N = w->dims[0], K = w->dims[1], td[2] = {K, N};
    kiln_tensor t = {0};
    kiln_status s = kiln_tensor_alloc(&t, KILN_F32, 2, td);
    if (s) return s;
    /* dst[k][n] = src[n][k]: the blocked transpose (AVX2 or its scalar twin) */
    kiln_nn_prims_active()->transpose32((size_t)K, (size_t)N, (const uint32_t *)w->data, (size_t)K,
                                        (uint32_t *)t.data, (size_t)N);
    kiln_tensor_release(w);
    *w = t;
    if (val->type.rank == 2) { /* the declared shape follows the data */
      kiln_dim d0 = val->type.dims[0];
      val->type.dims[0] = val->type.dims[1];
      val->type.dims[1] = d0;
    }
    tb->i = 0;
    done++;
  }
  if (count) *count = done;
  return KILN_OK;
}

/* ---- Conv weights packed once ---- */

struct kiln_cpu_conv_packs {
  const kiln_node *nodes; /* g->nodes: a node's pack is at[node - nodes] */
  int n_nodes;
  kiln_cpu_conv_pack *at; /* per node; data NULL: none */
  struct kiln_cpu_conv_packs *next;
};

/* The live sets (one per plan with packs), looked up by node address. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static kiln_cpu_conv_packs *reg_head;

/* The largest W (bytes) packed: KILN_CONV_PREPACK (0: none, all: any, N:
 * N MiB), default KILN_CONV_PREPACK_MAX. */
#define KILN_CONV_PREPACK_MAX ((int64_t)2 << 20)
static int64_t prepack_limit(void) {
  const char *e = getenv("KILN_CONV_PREPACK");
  if (!e || !*e) return KILN_CONV_PREPACK_MAX;
  if (!strcmp(e, "all")) return INT64_MAX;
  char *end;
  long long v = strtoll(e, &end, 10);
  return *end || v < 0 ? KILN_CONV_PREPACK_MAX : v > (INT64_MAX >> 21) ? INT64_MAX : (int64_t)v << 20;
}

void kiln_cpu_conv_packs_free(kiln_cpu_conv_packs *p) {
  if (!p) return;
  pthread_mutex_lock(&reg_mu);
  for (kiln_cpu_conv_packs **q = &reg_head; *q; q = &(*q)->next)
    if (*q == p) {
      *q = p->next;
      break;
    }
  pthread_mutex_unlock(&reg_mu);
  for (int i = 0; i < p->n_nodes; i++) {
    kiln_free(p->at[i].data);
    kiln_free(p->at[i].tdata);
    kiln_free(p->at[i].ctdata);
    kiln_free(p->at[i].wdata);
  }
  kiln_free(p->at);
  kiln_free(p);
}

/* A 1x1 kernel, group 1, pads absent or all 0 and strides absent or all 1
 * (the call checks the geometry again; auto_pad gives a 1x1 stride-1
 * kernel no pads); *strided: some stride above 1 (ResNet's downsampling:
 * conv.c samples the input, then runs the same tiles). */
static bool pointwise_g1(const kiln_node *n, const kiln_tensor *w, int64_t G, bool *strided) {
  *strided = false;
  if (G != 1) return false;
  for (int d = 2; d < w->rank; d++)
    if (w->dims[d] != 1) return false;
  for (int a = 0; a < n->n_attrs; a++) {
    bool st = !strcmp(n->attrs[a].name, "strides"), pd = !strcmp(n->attrs[a].name, "pads");
    if (!st && !pd) continue;
    if (n->attrs[a].type != KILN_ATTR_INTS) return false;
    for (size_t k = 0; k < n->attrs[a].n; k++) {
      if (st && n->attrs[a].ints[k] > 1) *strided = true;
      else if (n->attrs[a].ints[k] != (st ? 1 : 0)) return false;
    }
  }
  return true;
}

/* Whether node i (a 1x1 with group 1, K input channels) gets W^T for the
 * lanes-over-channels tiles: where its plane is unknown (stride 1 only) or
 * passes the tiles' size rule (every plane where KILN_CONV_PWT forces them;
 * none where it turns them off). */
static bool pwt_pack_wanted(const int64_t *planes, int i, int64_t K, bool strided) {
  int mode = kiln_pwt_mode();
  if (!kiln_pwt_tile()) return false;
  if (!planes || planes[i] < 0 || mode > 0) return !strided || mode > 0; /* strided: only where known to pay */
  return mode < 0 && kiln_pwt_plane_wanted(planes[i], K);
}

/* Whether Conv node n with W and group G is one Winograd F(2x2, 3x3) takes
 * (conv.c): 2-D, 3x3, group 1, strides and dilations 1 (absent or all 1). */
static bool wino_shape(const kiln_node *n, const kiln_tensor *w, int64_t G) {
  if (G != 1 || w->rank != 4 || w->dims[2] != 3 || w->dims[3] != 3) return false;
  for (int a = 0; a < n->n_attrs; a++)
    if (!strcmp(n->attrs[a].name, "strides") || !strcmp(n->attrs[a].name, "dilations")) {
      if (n->attrs[a].type != KILN_ATTR_INTS) return false;
      for (size_t j = 0; j < n->attrs[a].n; j++)
        if (n->attrs[a].ints[j] != 1) return false;
    }
  return true;
}

kiln_status kiln_cpu_conv_prepack(const kiln_graph *g, const int64_t *planes, const int64_t *widths,
                                  kiln_cpu_conv_packs **out, size_t *bytes) {
  *out = NULL;
  if (bytes) *bytes = 0;
  int64_t limit = prepack_limit();
  bool areader = kiln_sgemm_pack_reader() != NULL; /* else W^T packs alone, where the AVX2 tiles read them */
  if ((!areader && !kiln_pwt_tile()) || !limit || g->n_nodes < 1) return KILN_OK;
  kiln_cpu_conv_packs *p = NULL;
  size_t total = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    if (strcmp(n->op_type, "Conv") || (n->domain && *n->domain && strcmp(n->domain, "ai.onnx")) || n->n_in < 2 ||
        n->in[1] < 0)
      continue;
    const kiln_tensor *w = g->values[n->in[1]].init;
    if (!w || w->dtype != KILN_F32 || w->strided || w->rank < 3 || w->rank > 5 || !w->data || w->numel < 1)
      continue;
    int64_t G = 1;
    for (int a = 0; a < n->n_attrs; a++)
      if (!strcmp(n->attrs[a].name, "group")) G = n->attrs[a].type == KILN_ATTR_INT ? n->attrs[a].i : 0;
    if (G < 1 || w->dims[0] % G || w->dims[1] < 1 || (w->dims[1] == 1 && G > 1)) continue; /* depthwise: its own path */
    int64_t Mg = w->dims[0] / G, Kc = w->numel / w->dims[0], ksp = Kc / w->dims[1];
    int64_t gs = kiln_sgemm_wide_pack_a_floats(Mg, Kc);
    /* up to the limit (a large W is read from memory once a run either way: packing per call costs it little)
       the A pack where the wide GEMM reads packs, and W^T for the lanes-over-channels tiles of a 1x1 (pwt.h)
       unless its plane is known to take the tiles (W^T alone); the channel tiles' transposed pack (kernels wider
       than 1x1 on at most 2 spatial dims, K large enough: the AVX-512 direct path) up to KILN_CONV_CT_PACK_MAX
       too, alone above the limit; Winograd's U up to KILN_CONV_WINO_PACK_MAX, above the limit alone (no
       transposed pack: the direct path does not run) */
    bool fits = w->numel <= limit / (int64_t)sizeof(float);
    bool strided;
    bool tw = fits && pointwise_g1(n, w, G, &strided) && (!strided || areader) &&
              pwt_pack_wanted(planes, i, Kc, strided);
    bool aw = fits && areader && !(tw && planes && planes[i] >= 0);
    bool wg = areader && wino_shape(n, w, G) && kiln_conv_wino_on() &&
              w->numel <= (limit > KILN_CONV_WINO_PACK_MAX ? limit : KILN_CONV_WINO_PACK_MAX) / (int64_t)sizeof(float);
    bool ct = areader && w->rank <= 4 && ksp > 1 && Kc >= KILN_CONV_CT_MIN_K && (fits || !wg) &&
              w->numel <= (limit > KILN_CONV_CT_PACK_MAX ? limit : KILN_CONV_CT_PACK_MAX) / (int64_t)sizeof(float);
    /* over KILN_CONV_CT_PACK_ANY, only where the channel tiles can read it (conv.c ct_applies: rows of 7 or of a multiple of 14)
       or the row width is not known: not a dead copy of a big W */
    int64_t ow = widths ? widths[i] : -1;
    if (ct && !fits && w->numel > KILN_CONV_CT_PACK_ANY / (int64_t)sizeof(float) && ow >= 0 &&
        ow != KILN_CONV_CT_HALF && (ow == 0 || ow % KILN_CONV_CT_PX != 0))
      ct = false;
    if (!aw && !tw && !ct && !wg) continue;
    if (!p) {
      p = kiln_calloc(1, sizeof *p);
      if (p) p->at = kiln_calloc((size_t)g->n_nodes, sizeof *p->at);
      if (!p || !p->at) {
        kiln_free(p);
        return kiln_fail(KILN_E_NOMEM, "out of memory for the Conv weight packs");
      }
      p->nodes = g->nodes;
      p->n_nodes = g->n_nodes;
    }
    float *d = aw ? kiln_malloc((size_t)(gs * G) * sizeof *d) : NULL;
    if (aw && !d) {
      kiln_cpu_conv_packs_free(p);
      return kiln_fail(KILN_E_NOMEM, "out of memory packing the weights of Conv node '%s'", n->name ? n->name : "");
    }
    for (int64_t gi = 0; d && gi < G; gi++)
      kiln_sgemm_wide_pack_a((const float *)w->data + gi * Mg * Kc, Kc, Mg, Kc, d + gi * gs);
    int64_t tgs = 0;
    float *t = NULL;
    if (ct) {
      tgs = kiln_conv_ct_pack_floats(Mg, Kc);
      if (!(t = kiln_malloc((size_t)(tgs * G) * sizeof *t))) {
        kiln_free(d);
        kiln_cpu_conv_packs_free(p);
        return kiln_fail(KILN_E_NOMEM, "out of memory packing the weights of Conv node '%s'",
                         n->name ? n->name : "");
      }
      for (int64_t gi = 0; gi < G; gi++) kiln_conv_ct_pack((const float *)w->data + gi * Mg * Kc, Mg, Kc, t + gi * tgs);
      total += (size_t)(tgs * G) * sizeof *t;
    }
    p->at[i] = (kiln_cpu_conv_pack){
        .src = (const float *)w->data, .G = G, .Mg = Mg, .Kc = Kc, .gstride = gs, .data = d, .ctgstride = tgs, .ctdata = t};
    if (d) total += (size_t)(gs * G) * sizeof *d;
    if (tw) {
      float *tw_pack = kiln_malloc((size_t)kiln_pwt_pack_floats(Mg, Kc) * sizeof *tw_pack);
      if (!tw_pack) {
        kiln_cpu_conv_packs_free(p);
        return kiln_fail(KILN_E_NOMEM, "out of memory packing the weights of Conv node '%s'", n->name ? n->name : "");
      }
      kiln_pwt_pack((const float *)w->data, Mg, Kc, tw_pack);
      p->at[i].tdata = tw_pack;
      total += (size_t)kiln_pwt_pack_floats(Mg, Kc) * sizeof *tw_pack;
    }
    if (wg) {
      int64_t uf = kiln_wino_pack_floats(w->dims[0], w->dims[1]);
      float *u = kiln_malloc((size_t)uf * sizeof *u);
      if (!u || kiln_wino_pack((const float *)w->data, w->dims[0], w->dims[1], u)) {
        kiln_free(u);
        kiln_cpu_conv_packs_free(p);
        return kiln_fail(KILN_E_NOMEM, "out of memory packing the weights of Conv node '%s'", n->name ? n->name : "");
      }
      p->at[i].wdata = u;
      total += (size_t)uf * sizeof *u;
    }
  }
  if (p) {
    pthread_mutex_lock(&reg_mu);
    p->next = reg_head;
    reg_head = p;
    pthread_mutex_unlock(&reg_mu);
  }
  *out = p;
  if (bytes) *bytes = total;
  return KILN_OK;
}

const kiln_cpu_conv_pack *kiln_cpu_conv_pack_find(const kiln_node *n) {
  const kiln_cpu_conv_pack *r = NULL;
  pthread_mutex_lock(&reg_mu);
  for (kiln_cpu_conv_packs *q = reg_head; q && !r; q = q->next)
    if ((uintptr_t)n >= (uintptr_t)q->nodes && (uintptr_t)n < (uintptr_t)(q->nodes + q->n_nodes)) {
      size_t i = ((uintptr_t)n - (uintptr_t)q->nodes) / sizeof *n;
      if (q->at[i].data || q->at[i].tdata || q->at[i].ctdata || q->at[i].wdata) r = &q->at[i];
    }
  pthread_mutex_unlock(&reg_mu);
  return r;
}

/* ---- Gemm / MatMul B packed once ---- */

struct kiln_cpu_gemm_packs {
  int n;
  kiln_cpu_gemm_pack *at;
  struct kiln_cpu_gemm_packs *next;
};

static kiln_cpu_gemm_packs *greg_head; /* under reg_mu */

/* The largest B (bytes) packed: KILN_GEMM_PREPACK (0: none, all: any, N:
 * N MiB), default KILN_GEMM_PREPACK_MAX. */
#define KILN_GEMM_PREPACK_MAX ((int64_t)16 << 20)
static int64_t gemm_prepack_limit(void) {
  const char *e = getenv("KILN_GEMM_PREPACK");
  if (!e || !*e) return KILN_GEMM_PREPACK_MAX;
  if (!strcmp(e, "all")) return INT64_MAX;
  char *end;
  long long v = strtoll(e, &end, 10);
  return *end || v < 0 ? KILN_GEMM_PREPACK_MAX : v > (INT64_MAX >> 21) ? INT64_MAX : (int64_t)v << 20;
}

void kiln_cpu_gemm_packs_free(kiln_cpu_gemm_packs *p) {
  if (!p) return;
  pthread_mutex_lock(&reg_mu);
  for (kiln_cpu_gemm_packs **q = &greg_head; *q; q = &(*q)->next)
    if (*q == p) {
      *q = p->next;
      break;
    }
  pthread_mutex_unlock(&reg_mu);
  for (int i = 0; i < p->n; i++) kiln_free(p->at[i].data);
  kiln_free(p->at);
  kiln_free(p);
}

/* The B of node n that the GEMM would read untransposed from a constant:
 * MatMul's 2-D B, Gemm's B with transB = 0 (kiln_cpu_pretranspose turned
 * most transB = 1 ones). NULL otherwise. */
static const kiln_tensor *const_b(const kiln_graph *g, const kiln_node *n) {
  if ((n->domain && *n->domain && strcmp(n->domain, "ai.onnx")) || n->n_in < 2 || n->in[1] < 0) return NULL;
  bool mm = !strcmp(n->op_type, "MatMul");
  if (!mm && strcmp(n->op_type, "Gemm")) return NULL;
  for (int a = 0; !mm && a < n->n_attrs; a++)
    if (!strcmp(n->attrs[a].name, "transB") && (n->attrs[a].type != KILN_ATTR_INT || n->attrs[a].i != 0)) return NULL;
  const kiln_tensor *b = g->values[n->in[1]].init;
  if (!b || b->dtype != KILN_F32 || b->strided || b->rank != 2 || !b->data || b->dims[0] < 1 || b->dims[1] < 1)
    return NULL;
  return b;
}

kiln_status kiln_cpu_gemm_prepack(const kiln_graph *g, kiln_cpu_gemm_packs **out, size_t *bytes) {
  *out = NULL;
  if (bytes) *bytes = 0;
  int64_t limit = gemm_prepack_limit();
  if (!kiln_sgemm_pack_reader() || !limit || g->n_nodes < 1) return KILN_OK;
  kiln_cpu_gemm_packs *p = NULL;
  size_t total = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_tensor *b = const_b(g, &g->nodes[i]);
    if (!b || b->numel > limit / (int64_t)sizeof(float)) continue;
    bool have = false; /* one pack per B, whichever nodes read it */
    for (int k = 0; p && k < p->n && !have; k++) have = p->at[k].src == (const float *)b->data;
    if (have) continue;
    if (!p && !(p = kiln_calloc(1, sizeof *p))) return kiln_fail(KILN_E_NOMEM, "out of memory for the GEMM weight packs");
    kiln_cpu_gemm_pack *q = kiln_realloc(p->at, sizeof *q * (size_t)(p->n + 1));
    if (!q) {
      kiln_cpu_gemm_packs_free(p);
      return kiln_fail(KILN_E_NOMEM, "out of memory for the GEMM weight packs");
    }
    p->at = q;
    int64_t K = b->dims[0], N = b->dims[1], nf = kiln_sgemm_wide_pack_b_floats(K, N);
    float *d = kiln_malloc((size_t)nf * sizeof *d);
    if (!d) {
      kiln_cpu_gemm_packs_free(p);
      return kiln_fail(KILN_E_NOMEM, "out of memory packing the weights of %s node '%s'", g->nodes[i].op_type,
                       g->nodes[i].name ? g->nodes[i].name : "");
    }
    kiln_sgemm_wide_pack_b((const float *)b->data, N, K, N, d);
    p->at[p->n++] = (kiln_cpu_gemm_pack){(const float *)b->data, K, N, d};
    total += (size_t)nf * sizeof *d;
  }
  if (p) {
    pthread_mutex_lock(&reg_mu);
    p->next = greg_head;
    greg_head = p;
    pthread_mutex_unlock(&reg_mu);
  }
  *out = p;
  if (bytes) *bytes = total;
  return KILN_OK;
}

const float *kiln_cpu_gemm_pack_find(const float *b, int64_t K, int64_t N, int64_t ldb) {
  const float *r = NULL;
  if (ldb != N) return NULL;
  pthread_mutex_lock(&reg_mu);
  for (kiln_cpu_gemm_packs *q = greg_head; q && !r; q = q->next)
    for (int i = 0; i < q->n && !r; i++)
      if (q->at[i].src == b && q->at[i].K == K && q->at[i].N == N) r = q->at[i].data;
  pthread_mutex_unlock(&reg_mu);
  return r;
}
