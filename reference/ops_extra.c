/* reference/ops_extra: scalar kernels (see reference/ops.h) for the ops that
 * fit no other family:
 *   NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss (losses);
 *   Resize (opsets 10, 11, 13), Upsample (opsets 7, 9) (interpolation);
 *   QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear (quantization);
 *   HannWindow, HammingWindow, BlackmanWindow (signal windows, opset 17);
 *   NonMaxSuppression, RoiAlign, GridSample (detection / sampling);
 *   Unique.
 * Floats (f16/bf16 too) are computed in double and rounded once on the
 * store, with these exceptions, kept so that results agree bit for bit with
 * onnxruntime where the op's definition is float32 arithmetic:
 *   - QuantizeLinear / DynamicQuantizeLinear divide in float32 (x / scale)
 *     before rounding half to even (the rounding point decides the integer);
 *   - Resize / Upsample compute an output size from a scale as
 *     floor((float)input_dim * scale) in float32, as ONNX shape inference
 *     and onnxruntime do (floor(10 * 0.7f) is 7 there, 6 in double).
 *
 * Definitions where ONNX leaves the details open (each follows onnxruntime
 * and the ONNX reference implementation unless said otherwise):
 *   - Losses: a target equal to ignore_index contributes loss 0 and weight
 *     0; any other target outside [0, C) is KILN_E_INVALID_VALUE. 'mean'
 *     divides by the summed weight of the counted targets (by their count
 *     without a weight input); all targets ignored gives 0/0 = NaN.
 *   - Resize: output sizes from scales ignore roi (as ONNX shape inference
 *     and onnxruntime; the spec text multiplies by roi_end - roi_start).
 *     align_corners / tf_crop_and_resize / pytorch_half_pixel use
 *     length_resized = input_dim * scale when scales are given (so
 *     downsampling 4 by 0.6 maps with 2.4, as the ONNX tests expect), the
 *     output size when sizes are given. pytorch_half_pixel with
 *     length_resized == 1 samples coordinate 0 (the spec). Sampling
 *     positions outside the input take the edge value; exclude_outside
 *     drops them (linear and cubic) and renormalises the weights; taps with
 *     weight 0 are not read. Resize-10 and Upsample sample asymmetrically
 *     (x / scale) and their "nearest" picks floor (ceil when scale < 1), as
 *     onnxruntime does for those versions. Integer and bool outputs of
 *     linear/cubic interpolation are truncated toward zero (saturating).
 *   - QuantizeLinear: NaN quantizes to the zero point; saturation to the
 *     output type's range. DequantizeLinear applies an int32 zero point too.
 *   - DynamicQuantizeLinear: NaNs are left out of min/max and quantize to
 *     the zero point; an all-zero input (scale 0) gives scale 0, zero point
 *     0 and all-zero y.
 *   - Windows: a symmetric window of size 1 is [1] (the formula's 0/0);
 *     integer output types truncate toward zero.
 *   - NonMaxSuppression: a box is a candidate when score > score_threshold
 *     (when given); candidates are visited by descending score, ties by
 *     ascending box index; a box is suppressed when its IoU with a selected
 *     box is > iou_threshold (boxes of zero area never suppress); negative
 *     max_output_boxes_per_class is 0; iou_threshold outside [0, 1] is
 *     KILN_E_INVALID_VALUE.
 *   - RoiAlign follows onnxruntime, including 'max' mode (the maximum over
 *     samples of the largest of the four weighted corner terms) and, for
 *     output_half_pixel, rois at least 1x1.
 *   - GridSample follows torch.nn.functional.grid_sample (what the ONNX
 *     tests were made with): nearest rounds half to even, bicubic (A=-0.75)
 *     applies the padding mode to each of its 16 taps. X may be any type
 *     of the schema's T1 that kiln has (floats, integers, bool; not string
 *     or complex): Y has X's type, and for integers and bool "intermediate
 *     values are computed as floating point and cast to integer at the
 *     end" — in double here, truncated toward zero (saturating), bool true
 *     where the value is nonzero. Nearest copies X's values exactly.
 *   - Unique compares floats numerically (-0 == 0), NaNs equal to each
 *     other and above every number; sorted output is ascending
 *     (lexicographic over sub-tensors with an axis). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "reference/opcheck.h"
#include "reference/ops.h"

/* ------------------------------------------------------------------------ */
/* Common helpers                                                            */

#define T_F3 (KILN_T(KILN_F16) | KILN_T(KILN_F32) | KILN_T(KILN_F64))
#define T_BF KILN_T(KILN_BF16)
#define T_IDX (KILN_T(KILN_I32) | KILN_T(KILN_I64))
#define T_Q8 (KILN_T(KILN_U8) | KILN_T(KILN_I8))
#define T_F32 KILN_T(KILN_F32)
#define T_I64 KILN_T(KILN_I64)
#define T_NUMB (KILN_TS_NUM | KILN_T(KILN_BOOL))

static bool node_has_in(const kiln_node *n, int i) { return i < n->n_in && n->in[i] >= 0; }

/* Every attribute this file honours, with its ONNX type. */
static const struct {
  const char *name;
  kiln_attr_type type;
} attr_types[] = {
    {"reduction", KILN_ATTR_STRING},
    {"ignore_index", KILN_ATTR_INT},
    {"mode", KILN_ATTR_STRING},
    {"coordinate_transformation_mode", KILN_ATTR_STRING},
    {"cubic_coeff_a", KILN_ATTR_FLOAT},
    {"exclude_outside", KILN_ATTR_INT},
    {"extrapolation_value", KILN_ATTR_FLOAT},
    {"nearest_mode", KILN_ATTR_STRING},
    {"scales", KILN_ATTR_FLOATS},
    {"axis", KILN_ATTR_INT},
    {"periodic", KILN_ATTR_INT},
    {"output_datatype", KILN_ATTR_INT},
    {"center_point_box", KILN_ATTR_INT},
    {"output_height", KILN_ATTR_INT},
    {"output_width", KILN_ATTR_INT},
    {"sampling_ratio", KILN_ATTR_INT},
    {"spatial_scale", KILN_ATTR_FLOAT},
    {"align_corners", KILN_ATTR_INT},
    {"padding_mode", KILN_ATTR_STRING},
    {"sorted", KILN_ATTR_INT},
};

static const char *attr_type_name(kiln_attr_type t) {
  switch (t) {
  case KILN_ATTR_FLOAT: return "float";
  case KILN_ATTR_INT: return "int";
  case KILN_ATTR_STRING: return "string";
  case KILN_ATTR_FLOATS: return "floats";
  case KILN_ATTR_INTS: return "ints";
  case KILN_ATTR_TENSOR: return "tensor";
  default: return "another type";
  }
}

/* Opset range [since, until) (until 0: open) and attribute types; every
 * check starts here. */
static kiln_status chk_base(const kiln_node *n, int since, int until) {
  kiln_status s = kiln_opc_opset(n, since, until, n->opset < 7 ? KILN_E_VERSION : KILN_E_MODEL);
  if (s) return s;
  for (int a = 0; a < n->n_attrs; a++) {
    const kiln_attr *at = &n->attrs[a];
    for (size_t k = 0; k < sizeof attr_types / sizeof *attr_types; k++)
      if (!strcmp(attr_types[k].name, at->name) && at->type != attr_types[k].type)
        return kiln_fail(KILN_E_MODEL, "attribute '%s' is of type %s; %s expected", at->name,
                         attr_type_name(at->type), attr_type_name(attr_types[k].type));
  }
  return KILN_OK;
}

/* Fails when attribute name is present outside opsets [since, until). */
static kiln_status chk_attr_opset(const kiln_node *n, const char *name, int since, int until) {
  if (!kiln_node_attr(n, name)) return KILN_OK;
  if (n->opset >= since && (!until || n->opset < until)) return KILN_OK;
  if (until)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute '%s' of %s is only defined from opset %d to %d, not at opset %d",
                     name, n->op_type, since, until - 1, n->opset);
  return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute '%s' of %s is only defined from opset %d, not at opset %d",
                   name, n->op_type, since, n->opset);
}

/* A string attribute (default def) must be one of vals (NULL-terminated). */
static kiln_status chk_enum(const kiln_node *n, const char *name, const char *def, const char *const *vals) {
  const char *v = kiln_attr_string(n, name, def);
  char list[256];
  size_t len = 0;
  list[0] = 0;
  for (int i = 0; vals[i]; i++) {
    if (!strcmp(v, vals[i])) return KILN_OK;
    int k = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", vals[i]);
    if (k > 0 && (size_t)k < sizeof list - len) len += (size_t)k;
  }
  return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute '%s' is '%s'; %s at opset %d accepts: %s", name, v,
                   n->op_type, n->opset, list);
}

/* Index of a string attribute's value in vals (NULL-terminated), or -1. */
static int enum_index(const kiln_node *n, const char *name, const char *def, const char *const *vals) {
  const char *v = kiln_attr_string(n, name, def);
  for (int i = 0; vals[i]; i++)
    if (!strcmp(v, vals[i])) return i;
  return -1;
}

/* The declared type of input i, when known, must be in mask (the message
 * lists mask's types). */
static kiln_status chk_decl(const kiln_graph *g, const kiln_node *n, int i, const char *what, uint32_t mask) {
  return kiln_opc_chk_decl(g, n, i, what, mask, NULL);
}

static kiln_status chk_n_in(const kiln_node *n, int lo, int hi) {
  if (n->n_in >= lo && n->n_in <= hi) return KILN_OK;
  return kiln_fail(KILN_E_MODEL, "%s-%d takes %d to %d inputs, %d given", n->op_type, n->opset, lo, hi, n->n_in);
}

/* ---- run-time helpers */

/* Input i must be present and (mask != 0) of a type in mask (the message
 * lists mask's types). */
static kiln_status need(const kiln_op_call *c, int i, const char *what, uint32_t mask) {
  return kiln_opc_need(c, i, what, mask, NULL);
}

/* Optional input i, when present, must be of a type in mask. */
static kiln_status want(const kiln_op_call *c, int i, const char *what, uint32_t mask) {
  if (!kiln_opc_opt_in(c, i)) return KILN_OK;
  return need(c, i, what, mask);
}

#define SHP(t, buf) kiln_shape_str((t)->rank, (t)->dims, buf, sizeof buf)

/* Converts a double to an index when it is finite and within +-2^52 (so a
 * cast is defined); false otherwise. */
static bool to_index(double v, int64_t *out) {
  if (!(v > -4503599627370496.0 && v < 4503599627370496.0)) return false;
  *out = (int64_t)v;
  return true;
}

/* Round half to even of a double (independent of the FP rounding mode). */
static double round_half_even(double v) {
  if (!isfinite(v)) return v;
  double f = floor(v), d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return fmod(f, 2.0) == 0 ? f : f + 1;
}

/* ------------------------------------------------------------------------ */
/* NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss                        */

static const char *const reductions[] = {"none", "sum", "mean", NULL};

static bool is_sce(const kiln_node *n) { return !strcmp(n->op_type, "SoftmaxCrossEntropyLoss"); }

static uint32_t loss_types(const kiln_node *n) {
  return is_sce(n) && n->opset >= 13 ? T_F3 | T_BF : T_F3;
}

static kiln_status chk_loss(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 12, 0);
  if (!s) s = chk_n_in(n, 2, 3);
  if (!s) s = chk_enum(n, "reduction", "mean", reductions);
  if (!s) s = chk_decl(g, n, 0, is_sce(n) ? "scores" : "input", loss_types(n));
  if (!s) s = chk_decl(g, n, 1, is_sce(n) ? "labels" : "target", T_IDX);
  if (!s) s = kiln_opc_chk_decl_same(g, n, 2, 0, "weight");
  if (!s && n->n_out > 1 && !is_sce(n)) s = kiln_fail(KILN_E_MODEL, "%s has one output", n->op_type);
  return s;
}

static kiln_status run_loss(const kiln_op_call *c) {
  const kiln_node *n = c->node;
  bool sce = is_sce(n);
  kiln_status s = chk_loss(c->graph, n);
  if (!s) s = need(c, 0, sce ? "scores" : "input", loss_types(n));
  if (!s) s = need(c, 1, sce ? "labels" : "target", T_IDX);
  if (!s) s = want(c, 2, "weight", loss_types(n));
  if (s) return s;
  const kiln_tensor *x = c->in[0], *t = c->in[1], *w = kiln_opc_opt_in(c, 2);
  char b1[160], b2[160];
  if (w && (s = kiln_opc_need_same(c, 2, 0, "weight"))) return s;
  if (x->rank < 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 has shape %s; (N, C, d1, ..., dk) expected", SHP(x, b1));
  bool shape_ok = t->rank == x->rank - 1 && t->dims[0] == x->dims[0];
  for (int d = 1; shape_ok && d < t->rank; d++) shape_ok = t->dims[d] == x->dims[d + 1];
  if (!shape_ok)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 1 has shape %s; input 0 is %s, so (N, d1, ..., dk) expected",
                     SHP(t, b1), SHP(x, b2));
  int64_t N = x->dims[0], C = x->dims[1], D = 1;
  for (int d = 2; d < x->rank; d++) D *= x->dims[d];
  if (w && (w->rank != 1 || w->dims[0] != C))
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 2 (weight) has shape %s; [%lld] (C) expected", SHP(w, b1),
                     (long long)C);
  int red = enum_index(n, "reduction", "mean", reductions);
  bool has_ii = kiln_node_attr(n, "ignore_index") != NULL;
  int64_t ii = kiln_attr_int(n, "ignore_index", 0);
  kiln_tensor *out = &c->out[0];
  if (red == 0) s = kiln_tensor_alloc(out, x->dtype, t->rank, t->dims);
  else s = kiln_tensor_alloc(out, x->dtype, 0, NULL);
  if (s) return s;
  kiln_tensor *lp = NULL;
  if (sce && kiln_opc_out_wanted(c, 1)) {
    lp = &c->out[1];
    if ((s = kiln_tensor_alloc(lp, x->dtype, x->rank, x->dims))) return s;
  }
  double sum = 0, wsum = 0;
  for (int64_t i = 0; i < N; i++) {
    for (int64_t d = 0; d < D; d++) {
      int64_t ti = i * D + d;
      int64_t label = kiln_get_i(t, ti);
      /* log-softmax over the classes of this sample (SCE) */
      double m = -INFINITY, lse = 0;
      if (sce) {
        for (int64_t k = 0; k < C; k++) {
          double v = kiln_get_f(x, (i * C + k) * D + d);
          if (v > m || isnan(v)) m = v;
        }
        for (int64_t k = 0; k < C; k++) lse += exp(kiln_get_f(x, (i * C + k) * D + d) - m);
        lse = m + log(lse);
        if (lp)
          for (int64_t k = 0; k < C; k++)
            kiln_set_f(lp, (i * C + k) * D + d, kiln_get_f(x, (i * C + k) * D + d) - lse);
      }
      double loss = 0;
      if (!(has_ii && label == ii)) {
        if (label < 0 || label >= C)
          return kiln_fail(KILN_E_INVALID_VALUE, "%s value %lld at flat index %lld is outside [0, %lld)%s",
                           sce ? "label" : "target", (long long)label, (long long)ti, (long long)C,
                           has_ii ? " and is not ignore_index" : "");
        double wc = w ? kiln_get_f(w, label) : 1.0;
        double v = kiln_get_f(x, (i * C + label) * D + d);
        if (sce) v -= lse;
        loss = -v * wc;
        sum += loss;
        wsum += wc;
      }
      if (red == 0) kiln_set_f(out, ti, loss);
    }
  }
  if (red == 1) kiln_set_f(out, 0, sum);
  if (red == 2) kiln_set_f(out, 0, sum / wsum);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Resize, Upsample                                                          */

enum { RZ_NEAREST, RZ_LINEAR, RZ_CUBIC };
static const char *const rz_modes[] = {"nearest", "linear", "cubic", NULL};
static const char *const rz_modes2[] = {"nearest", "linear", NULL};

enum { CT_HALF_PIXEL, CT_PYTORCH_HALF_PIXEL, CT_ALIGN_CORNERS, CT_ASYMMETRIC, CT_TF_CROP_AND_RESIZE, CT_TF_HALF_PIXEL_FOR_NN };
static const char *const rz_ctms[] = {"half_pixel",         "pytorch_half_pixel", "align_corners",
                                      "asymmetric",         "tf_crop_and_resize", "tf_half_pixel_for_nn",
                                      NULL};
static const char *const rz_ctms13[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                        "tf_crop_and_resize", NULL};

/* NM_SIMPLE: Resize-10 / Upsample: floor, or ceil when downsampling. */
enum { NM_ROUND_PREFER_FLOOR, NM_ROUND_PREFER_CEIL, NM_FLOOR, NM_CEIL, NM_SIMPLE };
static const char *const rz_nearest_modes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", NULL};

typedef struct rz_params {
  int mode, ctm, nearest;
  double cubic_a, extrapolation;
  bool exclude_outside;
} rz_params;

/* The (at most 4) input positions and weights one output coordinate of
 * one dim reads; outside: tf_crop_and_resize extrapolates. */
typedef struct rz_taps {
  int n;
  bool outside;
  int64_t idx[4];
  double w[4];
} rz_taps;

static uint32_t resize_types(const kiln_node *n) {
  return !strcmp(n->op_type, "Resize") && n->opset >= 13 ? T_NUMB | T_BF : T_NUMB;
}

static kiln_status chk_resize(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 10, 0);
  if (s) return s;
  if (n->opset < 11) {
    if ((s = chk_n_in(n, 2, 2))) return s;
    static const char *const later[] = {"coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                                        "extrapolation_value", "nearest_mode"};
    for (size_t i = 0; i < sizeof later / sizeof *later; i++)
      if ((s = chk_attr_opset(n, later[i], 11, 0))) return s;
    if ((s = chk_enum(n, "mode", "nearest", rz_modes2))) return s;
    if ((s = chk_decl(g, n, 1, "scales", T_F32))) return s;
  } else {
    if ((s = chk_n_in(n, n->opset < 13 ? 3 : 1, 4))) return s;
    if (n->opset < 13 && (!node_has_in(n, 1) || !node_has_in(n, 2)))
      return kiln_fail(KILN_E_MODEL, "Resize-11 requires inputs 1 (roi) and 2 (scales); they may be empty tensors");
    if ((s = chk_enum(n, "mode", "nearest", rz_modes))) return s;
    if ((s = chk_enum(n, "coordinate_transformation_mode", "half_pixel", n->opset < 13 ? rz_ctms : rz_ctms13)))
      return s;
    if ((s = chk_enum(n, "nearest_mode", "round_prefer_floor", rz_nearest_modes))) return s;
    if ((s = kiln_opc_flag(n, "exclude_outside", 0))) return s;
    if (!isfinite(kiln_attr_float(n, "cubic_coeff_a", -0.75f)))
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'cubic_coeff_a' is not finite");
    if ((s = chk_decl(g, n, 1, "roi", T_F3))) return s;
    if ((s = chk_decl(g, n, 2, "scales", T_F32))) return s;
    if ((s = chk_decl(g, n, 3, "sizes", T_I64))) return s;
  }
  return chk_decl(g, n, 0, "X", resize_types(n));
}

static kiln_status chk_upsample(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 7, 10);
  if (s) return s;
  if ((s = chk_enum(n, "mode", "nearest", rz_modes2))) return s;
  if ((s = chk_attr_opset(n, "scales", 7, 9))) return s;
  if (n->opset < 9) {
    if ((s = chk_n_in(n, 1, 1))) return s;
    if (!kiln_node_attr(n, "scales")) return kiln_fail(KILN_E_MODEL, "Upsample-7 requires attribute 'scales'");
  } else {
    if ((s = chk_n_in(n, 2, 2))) return s;
    if ((s = chk_decl(g, n, 1, "scales", T_F32))) return s;
  }
  return chk_decl(g, n, 0, "X", resize_types(n));
}

/* Cubic convolution weights (Keys) for the taps at offsets -1, 0, 1, 2
 * around floor(x), r = x - floor(x). */
static void cubic_coeffs(double r, double A, double *c) {
  double t;
  t = r + 1;
  c[0] = ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
  t = r;
  c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
  t = 1 - r;
  c[2] = ((A + 2) * t - (A + 3)) * t * t + 1;
  t = 2 - r;
  c[3] = ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
}

/* Input coordinate of output coordinate o along one dim. */
static double rz_coord(const rz_params *p, int64_t o, int64_t in, double scale, double lres, double r0,
                       double r1) {
  double x = (double)o;
  switch (p->ctm) {
  case CT_HALF_PIXEL: return (x + 0.5) / scale - 0.5;
  case CT_PYTORCH_HALF_PIXEL: return lres > 1 ? (x + 0.5) / scale - 0.5 : 0;
  case CT_ALIGN_CORNERS: return lres == 1 ? 0 : x * (double)(in - 1) / (lres - 1);
  case CT_TF_HALF_PIXEL_FOR_NN: return (x + 0.5) / scale;
  case CT_TF_CROP_AND_RESIZE:
    return lres > 1 ? r0 * (double)(in - 1) + x * (r1 - r0) * (double)(in - 1) / (lres - 1)
                    : 0.5 * (r0 + r1) * (double)(in - 1);
  default: return x / scale; /* asymmetric */
  }
}

static void rz_make_taps(const rz_params *p, int64_t o, int64_t in, double scale, double lres, double r0,
                         double r1, rz_taps *t) {
  memset(t, 0, sizeof *t);
  double x = rz_coord(p, o, in, scale, lres, r0, r1);
  if (p->ctm == CT_TF_CROP_AND_RESIZE && !(x >= 0 && x <= (double)(in - 1))) {
    t->outside = true;
    return;
  }
  /* Far outside, every tap is clamped (or excluded) alike: bound x so the
   * index arithmetic stays small. */
  if (!(x > -4.0)) x = -4.0;
  if (!(x < (double)in + 3.0)) x = (double)in + 3.0;
  double f = floor(x), r = x - f;
  int64_t x0 = (int64_t)f;
  if (p->mode == RZ_NEAREST) {
    int64_t k = x0;
    switch (p->nearest) {
    case NM_ROUND_PREFER_FLOOR: k = r <= 0.5 ? x0 : x0 + 1; break;
    case NM_ROUND_PREFER_CEIL: k = r < 0.5 ? x0 : x0 + 1; break;
    case NM_FLOOR: k = x0; break;
    case NM_CEIL: k = r > 0 ? x0 + 1 : x0; break;
    default: k = scale < 1 && r > 0 ? x0 + 1 : x0; break; /* NM_SIMPLE */
    }
    t->n = 1;
    t->idx[0] = k < 0 ? 0 : k >= in ? in - 1 : k;
    t->w[0] = 1;
    return;
  }
  int64_t idx[4];
  double w[4];
  int n;
  if (p->mode == RZ_LINEAR) {
    n = 2;
    idx[0] = x0, idx[1] = x0 + 1;
    w[0] = 1 - r, w[1] = r;
  } else {
    n = 4;
    for (int k = 0; k < 4; k++) idx[k] = x0 - 1 + k;
    cubic_coeffs(r, p->cubic_a, w);
  }
  if (p->exclude_outside) {
    double sum = 0;
    for (int k = 0; k < n; k++) {
      if (idx[k] < 0 || idx[k] >= in) w[k] = 0;
      sum += w[k];
    }
    if (sum != 0)
      for (int k = 0; k < n; k++) w[k] /= sum;
  }
  for (int k = 0; k < n; k++) {
    if (w[k] == 0) continue;
    t->idx[t->n] = idx[k] < 0 ? 0 : idx[k] >= in ? in - 1 : idx[k];
    t->w[t->n] = w[k];
    t->n++;
  }
}

/* Resizes x into c->out[0] of shape out_dims. scale[d]: the scale of dim d
 * (given, or out/in from sizes); lres[d]: length_resized (in * scale, or
 * the size); roi: 2 * rank values (start..., end...), or NULL. */
static kiln_status resize_core(const kiln_op_call *c, const kiln_tensor *x, const rz_params *p,
                               const double *scale, const double *lres, const int64_t *out_dims,
                               const double *roi) {
  kiln_tensor *y = &c->out[0];
  int rank = x->rank;
  kiln_status s = kiln_tensor_alloc(y, x->dtype, rank, out_dims);
  if (s || y->numel == 0) return s;
  if (x->numel == 0) {
    char b1[160], b2[160];
    return kiln_fail(KILN_E_INVALID_VALUE, "cannot resize the empty input %s to the non-empty shape %s",
                     SHP(x, b1), SHP(y, b2));
  }
  int64_t total = 0;
  for (int d = 0; d < rank; d++) total += out_dims[d];
  rz_taps *taps = kiln_calloc((size_t)(total > 0 ? total : 1), sizeof *taps);
  if (!taps) return kiln_fail(KILN_E_NOMEM, "out of memory for %lld interpolation positions", (long long)total);
  rz_taps *td[KILN_MAX_RANK];
  int64_t off = 0;
  for (int d = 0; d < rank; d++) {
    td[d] = taps + off;
    double r0 = roi ? roi[d] : 0, r1 = roi ? roi[rank + d] : 1;
    for (int64_t o = 0; o < out_dims[d]; o++)
      rz_make_taps(p, o, x->dims[d], scale[d], lres[d], r0, r1, &td[d][o]);
    off += out_dims[d];
  }
  int64_t st[KILN_MAX_RANK], oi[KILN_MAX_RANK] = {0};
  kiln_strides(rank, x->dims, st);
  for (int64_t flat = 0; flat < y->numel; flat++) {
    bool outside = false;
    for (int d = 0; d < rank; d++) outside |= td[d][oi[d]].outside;
    if (outside) {
      kiln_set_f(y, flat, p->extrapolation);
    } else if (p->mode == RZ_NEAREST) {
      int64_t src = 0;
      for (int d = 0; d < rank; d++) src += td[d][oi[d]].idx[0] * st[d];
      kiln_copy_elem(y, flat, x, src);
    } else {
      double acc = 0;
      int k[KILN_MAX_RANK] = {0};
      bool empty = false;
      for (int d = 0; d < rank; d++) empty |= td[d][oi[d]].n == 0;
      while (!empty) {
        double w = 1;
        int64_t src = 0;
        for (int d = 0; d < rank; d++) {
          const rz_taps *t = &td[d][oi[d]];
          w *= t->w[k[d]];
          src += t->idx[k[d]] * st[d];
        }
        acc += w * kiln_get_f(x, src);
        int d = rank - 1;
        while (d >= 0 && ++k[d] == td[d][oi[d]].n) k[d--] = 0;
        if (d < 0) break;
      }
      kiln_set_f(y, flat, acc);
    }
    for (int d = rank - 1; d >= 0; d--) {
      if (++oi[d] < out_dims[d]) break;
      oi[d] = 0;
    }
  }
  kiln_free(taps);
  return KILN_OK;
}

/* Output sizes from scales: floor((float)in * scale) in float32 (as ONNX
 * shape inference and onnxruntime). Scales must be finite and > 0 (>= 1 for
 * Upsample). */
static kiln_status sizes_from_scales(const kiln_tensor *x, const double *sc, bool upsample, int64_t *out,
                                     double *lres) {
  for (int d = 0; d < x->rank; d++) {
    if (!(sc[d] > 0) || !isfinite(sc[d]) || (upsample && sc[d] < 1))
      return kiln_fail(KILN_E_INVALID_VALUE, "scale %g of dim %d is invalid; it must be finite and %s", sc[d], d,
                       upsample ? ">= 1" : "> 0");
    float f = floorf((float)x->dims[d] * (float)sc[d]);
    if (!(f < 4.6e18f))
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "scale %g makes dim %d too large", sc[d], d);
    out[d] = (int64_t)f;
    lres[d] = (double)x->dims[d] * sc[d];
  }
  return KILN_OK;
}

/* Reads a float scales tensor with rank(x) values. */
static kiln_status read_scales(const kiln_tensor *t, int i, const kiln_tensor *x, double *sc) {
  char b[160];
  if (t->rank != 1 || t->numel != x->rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %d (scales) has shape %s; %d values (the rank of X) expected", i,
                     SHP(t, b), x->rank);
  for (int d = 0; d < x->rank; d++) sc[d] = kiln_get_f(t, d);
  return KILN_OK;
}

static kiln_status run_resize(const kiln_op_call *c) {
  const kiln_node *n = c->node;
  kiln_status s = chk_resize(c->graph, n);
  if (!s) s = need(c, 0, "X", resize_types(n));
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  rz_params p = {0};
  p.mode = enum_index(n, "mode", "nearest", rz_modes);
  double sc[KILN_MAX_RANK], lres[KILN_MAX_RANK], roi[2 * KILN_MAX_RANK];
  int64_t od[KILN_MAX_RANK];
  char b[160];
  if (c->opset < 11) {
    p.ctm = CT_ASYMMETRIC;
    p.nearest = NM_SIMPLE;
    if ((s = need(c, 1, "scales", T_F32))) return s;
    if ((s = read_scales(c->in[1], 1, x, sc))) return s;
    if ((s = sizes_from_scales(x, sc, false, od, lres))) return s;
    return resize_core(c, x, &p, sc, lres, od, NULL);
  }
  p.ctm = enum_index(n, "coordinate_transformation_mode", "half_pixel", rz_ctms);
  p.nearest = enum_index(n, "nearest_mode", "round_prefer_floor", rz_nearest_modes);
  p.cubic_a = kiln_attr_float(n, "cubic_coeff_a", -0.75f);
  p.exclude_outside = kiln_attr_int(n, "exclude_outside", 0) != 0;
  p.extrapolation = kiln_attr_float(n, "extrapolation_value", 0.0f);
  if ((s = want(c, 1, "roi", T_F3)) || (s = want(c, 2, "scales", T_F32)) || (s = want(c, 3, "sizes", T_I64)))
    return s;
  const kiln_tensor *tr = kiln_opc_opt_in(c, 1), *ts = kiln_opc_opt_in(c, 2), *tz = kiln_opc_opt_in(c, 3);
  bool has_scales = ts && ts->numel > 0, has_sizes = tz && tz->numel > 0;
  if (has_scales && has_sizes)
    return kiln_fail(KILN_E_INVALID_VALUE, "both scales and sizes are given; only one may be");
  if (has_scales) {
    if ((s = read_scales(ts, 2, x, sc))) return s;
    if ((s = sizes_from_scales(x, sc, false, od, lres))) return s;
  } else if (has_sizes) {
    if (tz->rank != 1 || tz->numel != x->rank)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 3 (sizes) has shape %s; %d values (the rank of X) expected",
                       SHP(tz, b), x->rank);
    for (int d = 0; d < x->rank; d++) {
      od[d] = kiln_get_i(tz, d);
      if (od[d] < 0)
        return kiln_fail(KILN_E_INVALID_VALUE, "sizes[%d] is %lld; sizes must not be negative", d, (long long)od[d]);
      sc[d] = x->dims[d] ? (double)od[d] / (double)x->dims[d] : 1.0;
      lres[d] = (double)od[d];
    }
  } else {
    return kiln_fail(KILN_E_INVALID_VALUE, "neither scales nor sizes is given (one must be non-empty)");
  }
  const double *proi = NULL;
  if (p.ctm == CT_TF_CROP_AND_RESIZE) {
    for (int d = 0; d < x->rank; d++) roi[d] = 0, roi[x->rank + d] = 1;
    if (tr && tr->numel > 0) {
      if (tr->rank != 1 || tr->numel != 2 * x->rank)
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 1 (roi) has shape %s; %d values (2 x the rank of X) expected",
                         SHP(tr, b), 2 * x->rank);
      for (int i = 0; i < 2 * x->rank; i++) {
        roi[i] = kiln_get_f(tr, i);
        if (!isfinite(roi[i])) return kiln_fail(KILN_E_INVALID_VALUE, "roi[%d] is not finite", i);
      }
    }
    proi = roi;
  }
  return resize_core(c, x, &p, sc, lres, od, proi);
}

static kiln_status run_upsample(const kiln_op_call *c) {
  const kiln_node *n = c->node;
  kiln_status s = chk_upsample(c->graph, n);
  if (!s) s = need(c, 0, "X", resize_types(n));
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  rz_params p = {0};
  p.mode = enum_index(n, "mode", "nearest", rz_modes);
  p.ctm = CT_ASYMMETRIC;
  p.nearest = NM_SIMPLE;
  double sc[KILN_MAX_RANK], lres[KILN_MAX_RANK];
  int64_t od[KILN_MAX_RANK];
  if (c->opset < 9) {
    size_t ns = 0;
    const float *f = kiln_attr_floats(n, "scales", &ns);
    if (ns != (size_t)x->rank)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "attribute 'scales' has %zu values; X has rank %d", ns, x->rank);
    for (int d = 0; d < x->rank; d++) sc[d] = f[d];
  } else {
    if ((s = need(c, 1, "scales", T_F32))) return s;
    if ((s = read_scales(c->in[1], 1, x, sc))) return s;
  }
  if ((s = sizes_from_scales(x, sc, true, od, lres))) return s;
  return resize_core(c, x, &p, sc, lres, od, NULL);
}

/* ------------------------------------------------------------------------ */
/* QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear                   */

static bool is_quantize(const kiln_node *n) { return !strcmp(n->op_type, "QuantizeLinear"); }

static uint32_t q_x_types(const kiln_node *n) {
  return is_quantize(n) ? T_F32 | KILN_T(KILN_I32) : T_Q8 | KILN_T(KILN_I32);
}

static kiln_status chk_qdq(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 10, 0);
  if (!s) s = chk_n_in(n, 2, 3);
  if (!s) s = chk_attr_opset(n, "axis", 13, 0);
  if (!s) s = chk_decl(g, n, 0, "x", q_x_types(n));
  if (!s) s = chk_decl(g, n, 1, "scale", T_F32);
  if (!s && is_quantize(n)) s = chk_decl(g, n, 2, "zero_point", T_Q8);
  if (!s && !is_quantize(n)) s = kiln_opc_chk_decl_same(g, n, 2, 0, "zero_point");
  if (s) return s;
  int r = kiln_opc_decl_rank(g, n, 0);
  int64_t axis = kiln_attr_int(n, "axis", 1);
  if (r >= 0 && kiln_node_attr(n, "axis") && (axis < -r || axis >= r))
    return kiln_fail(KILN_E_MODEL, "axis %lld is out of range for an input of rank %d", (long long)axis, r);
  return KILN_OK;
}

/* Scale/zero-point layout shared by QuantizeLinear and DequantizeLinear:
 * element i of x uses parameter ((i / inner) % nch), or 0 per tensor. */
typedef struct q_layout {
  int64_t inner, nch;
} q_layout;

static kiln_status q_layout_of(const kiln_op_call *c, const kiln_tensor *x, q_layout *q) {
  const kiln_tensor *sc = c->in[1], *zp = kiln_opc_opt_in(c, 2);
  char b1[160], b2[160];
  q->inner = 1, q->nch = 1;
  bool per_tensor = sc->numel == 1 && sc->rank <= 1;
  if (!per_tensor) {
    if (c->opset < 13 || sc->rank != 1)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 1 (scale) has shape %s; %s expected", SHP(sc, b1),
                       c->opset < 13 ? "a scalar" : "a scalar or a 1-D tensor");
    int64_t a = kiln_attr_int(c->node, "axis", 1);
    if (a < -x->rank || a >= x->rank)
      return kiln_fail(KILN_E_INVALID_VALUE, "axis %lld is out of range for input 0 of shape %s", (long long)a,
                       SHP(x, b1));
    int axis = (int)(a < 0 ? a + x->rank : a);
    if (sc->dims[0] != x->dims[axis])
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 1 (scale) has shape %s; input 0 is %s, so %lld values (axis %d) expected",
                       SHP(sc, b1), SHP(x, b2), (long long)x->dims[axis], axis);
    for (int d = axis + 1; d < x->rank; d++) q->inner *= x->dims[d];
    q->nch = x->dims[axis];
  }
  if (zp && (zp->numel != sc->numel || zp->rank > 1))
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 2 (zero point) has shape %s; it must match scale's %s", SHP(zp, b1),
                     SHP(sc, b2));
  return KILN_OK;
}

static void q_range(kiln_dtype t, double *lo, double *hi) {
  if (t == KILN_I8) *lo = -128, *hi = 127;
  else *lo = 0, *hi = 255;
}

/* round_half_even(v) + zp saturated to [lo, hi]; NaN gives the zero point. */
static int64_t q_saturate(double v, double zp, double lo, double hi) {
  if (isnan(v)) v = 0;
  double r = round_half_even(v) + zp;
  if (r < lo) r = lo;
  if (r > hi) r = hi;
  return (int64_t)r;
}

static kiln_status run_quantize(const kiln_op_call *c) {
  kiln_status s = chk_qdq(c->graph, c->node);
  if (!s) s = need(c, 0, "x", q_x_types(c->node));
  if (!s) s = need(c, 1, "y_scale", T_F32);
  if (!s) s = want(c, 2, "y_zero_point", T_Q8);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *sc = c->in[1], *zp = kiln_opc_opt_in(c, 2);
  q_layout q;
  if ((s = q_layout_of(c, x, &q))) return s;
  kiln_dtype ot = zp ? zp->dtype : KILN_U8;
  kiln_tensor *y = &c->out[0];
  if ((s = kiln_tensor_alloc(y, ot, x->rank, x->dims))) return s;
  double lo, hi;
  q_range(ot, &lo, &hi);
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t ch = (i / q.inner) % q.nch;
    float v = (float)kiln_get_f(x, i) / (float)kiln_get_f(sc, ch);
    kiln_set_i(y, i, q_saturate(v, zp ? (double)kiln_get_i(zp, ch) : 0, lo, hi));
  }
  return KILN_OK;
}

static kiln_status run_dequantize(const kiln_op_call *c) {
  kiln_status s = chk_qdq(c->graph, c->node);
  if (!s) s = need(c, 0, "x", q_x_types(c->node));
  if (!s) s = need(c, 1, "x_scale", T_F32);
  if (!s && kiln_opc_opt_in(c, 2)) s = kiln_opc_need_same(c, 2, 0, "x_zero_point");
  if (s) return s;
  const kiln_tensor *x = c->in[0], *sc = c->in[1], *zp = kiln_opc_opt_in(c, 2);
  q_layout q;
  if ((s = q_layout_of(c, x, &q))) return s;
  kiln_tensor *y = &c->out[0];
  if ((s = kiln_tensor_alloc(y, KILN_F32, x->rank, x->dims))) return s;
  if (!x->strided && (x->dtype == KILN_I8 || x->dtype == KILN_U8)) { /* the loop below, a channel's run at a time */
    float *out = y->data;
    for (int64_t i = 0; i < x->numel;) {
      int64_t ch = (i / q.inner) % q.nch, run = q.nch == 1 ? x->numel : q.inner;
      int64_t end = i + run < x->numel ? i + run : x->numel;
      double z = zp ? (double)kiln_get_i(zp, ch) : 0, f = kiln_get_f(sc, ch);
      if (x->dtype == KILN_I8)
        for (const int8_t *v = x->data; i < end; i++) out[i] = (float)(((double)v[i] - z) * f);
      else
        for (const uint8_t *v = x->data; i < end; i++) out[i] = (float)(((double)v[i] - z) * f);
    }
    return KILN_OK;
  }
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t ch = (i / q.inner) % q.nch;
    double z = zp ? (double)kiln_get_i(zp, ch) : 0;
    kiln_set_f(y, i, ((double)kiln_get_i(x, i) - z) * kiln_get_f(sc, ch));
  }
  return KILN_OK;
}

static kiln_status chk_dynq(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 11, 0);
  if (!s) s = chk_decl(g, n, 0, "x", T_F32);
  return s;
}

static kiln_status run_dynq(const kiln_op_call *c) {
  kiln_status s = chk_dynq(c->graph, c->node);
  if (!s) s = need(c, 0, "x", T_F32);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  float mn = 0, mx = 0;
  for (int64_t i = 0; i < x->numel; i++) {
    float v = (float)kiln_get_f(x, i);
    if (v < mn) mn = v;
    if (v > mx) mx = v;
  }
  float scale = (mx - mn) / 255.0f;
  double zp = 0;
  if (scale != 0) {
    float z = 0.0f - mn / scale;
    zp = round_half_even(z < 0 ? 0 : z > 255 ? 255 : z);
  }
  if ((s = kiln_tensor_alloc(&c->out[0], KILN_U8, x->rank, x->dims))) return s;
  if (c->n_out > 1) {
    if ((s = kiln_tensor_alloc(&c->out[1], KILN_F32, 0, NULL))) return s;
    kiln_set_f(&c->out[1], 0, scale);
  }
  if (c->n_out > 2) {
    if ((s = kiln_tensor_alloc(&c->out[2], KILN_U8, 0, NULL))) return s;
    kiln_set_i(&c->out[2], 0, (int64_t)zp);
  }
  for (int64_t i = 0; i < x->numel; i++) {
    float v = scale != 0 ? (float)kiln_get_f(x, i) / scale : 0.0f;
    kiln_set_i(&c->out[0], i, q_saturate(v, zp, 0, 255));
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* HannWindow, HammingWindow, BlackmanWindow                                 */

#define T_WIN_OUT (KILN_TS_NUM | T_BF)

static kiln_status chk_window(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 17, 0);
  if (!s) s = kiln_opc_flag(n, "periodic", 0);
  if (!s) s = chk_decl(g, n, 0, "size", T_IDX);
  if (s) return s;
  int64_t dt = kiln_attr_int(n, "output_datatype", KILN_F32);
  if (dt < 0 || dt >= KILN_DTYPE_COUNT || !kiln_opc_in_mask(T_WIN_OUT, (kiln_dtype)dt))
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'output_datatype' is %lld, not a numeric data type",
                     (long long)dt);
  return KILN_OK;
}

static kiln_status run_window(const kiln_op_call *c) {
  const kiln_node *n = c->node;
  kiln_status s = chk_window(c->graph, n);
  if (!s) s = need(c, 0, "size", T_IDX);
  if (s) return s;
  int64_t size;
  if ((s = kiln_opc_scalar_i(c->in[0], 0, "size", &size))) return s;
  if (size < 0) return kiln_fail(KILN_E_INVALID_VALUE, "window size %lld is negative", (long long)size);
  double a0, a1, a2 = 0;
  if (!strcmp(n->op_type, "HannWindow")) a0 = 0.5, a1 = 0.5;
  else if (!strcmp(n->op_type, "HammingWindow")) a0 = 25.0 / 46.0, a1 = 21.0 / 46.0;
  else a0 = 0.42, a1 = 0.5, a2 = 0.08;
  bool periodic = kiln_attr_int(n, "periodic", 1) != 0;
  kiln_tensor *y = &c->out[0];
  if ((s = kiln_tensor_alloc(y, (kiln_dtype)kiln_attr_int(n, "output_datatype", KILN_F32), 1, &size))) return s;
  int64_t den = periodic ? size : size - 1;
  for (int64_t i = 0; i < size; i++) {
    double v = 1.0;
    if (den > 0) {
      double t = 2 * KILN_OPC_PI * (double)i / (double)den;
      v = a0 - a1 * cos(t) + a2 * cos(2 * t);
    }
    /* an integer output is the cast of the float32 window (the operators'
       function bodies): 1 - 1e-16 from the double cosines rounds to 1 first,
       not down to 0 (Blackman, size 2, periodic, int32) */
    if (!kiln_dtype_is_float(y->dtype)) v = (double)(float)v;
    kiln_set_f(y, i, v);
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Stable sort of int64 keys with a comparator (bottom-up merge sort)        */

typedef int (*cmp_fn)(const void *ctx, int64_t a, int64_t b);

static kiln_status stable_sort(int64_t *v, int64_t n, cmp_fn cmp, const void *ctx) {
  if (n < 2) return KILN_OK;
  int64_t *tmp = kiln_malloc((size_t)n * sizeof *tmp);
  if (!tmp) return kiln_fail(KILN_E_NOMEM, "out of memory sorting %lld items", (long long)n);
  for (int64_t width = 1; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = cmp(ctx, v[j], v[i]) < 0 ? v[j++] : v[i++];
      while (i < mid) tmp[k++] = v[i++];
      while (j < hi) tmp[k++] = v[j++];
    }
    memcpy(v, tmp, (size_t)n * sizeof *v);
  }
  kiln_free(tmp);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* NonMaxSuppression                                                         */

static kiln_status chk_nms(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 10, 0);
  if (!s) s = kiln_opc_flag(n, "center_point_box", 0);
  if (!s) s = chk_decl(g, n, 0, "boxes", T_F32);
  if (!s) s = chk_decl(g, n, 1, "scores", T_F32);
  if (!s) s = chk_decl(g, n, 2, "max_output_boxes_per_class", T_IDX);
  if (!s) s = chk_decl(g, n, 3, "iou_threshold", T_F32);
  if (!s) s = chk_decl(g, n, 4, "score_threshold", T_F32);
  return s;
}

typedef struct nms_ctx {
  const kiln_tensor *scores;
  int64_t base; /* flat index of score 0 of this batch and class */
} nms_ctx;

/* Descending score, NaN last; ties keep the index order (stable sort). */
static int nms_cmp(const void *ctx, int64_t a, int64_t b) {
  const nms_ctx *k = ctx;
  double x = kiln_get_f(k->scores, k->base + a), y = kiln_get_f(k->scores, k->base + b);
  if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);
  return (x < y) - (x > y);
}

/* Corners (ymin, xmin, ymax, xmax) of box i of batch b. */
static void nms_box(const kiln_tensor *boxes, int64_t b, int64_t i, bool center, double *r) {
  int64_t o = (b * boxes->dims[1] + i) * 4;
  double v[4];
  for (int k = 0; k < 4; k++) v[k] = kiln_get_f(boxes, o + k);
  if (center) { /* [x_center, y_center, width, height] */
    r[0] = v[1] - v[3] / 2, r[2] = v[1] + v[3] / 2;
    r[1] = v[0] - v[2] / 2, r[3] = v[0] + v[2] / 2;
  } else { /* [y1, x1, y2, x2], any diagonal pair of corners */
    r[0] = fmin(v[0], v[2]), r[2] = fmax(v[0], v[2]);
    r[1] = fmin(v[1], v[3]), r[3] = fmax(v[1], v[3]);
  }
}

static bool nms_suppresses(const double *a, const double *b, double thr) {
  double ih = fmin(a[2], b[2]) - fmax(a[0], b[0]), iw = fmin(a[3], b[3]) - fmax(a[1], b[1]);
  if (!(ih > 0 && iw > 0)) return false;
  double inter = ih * iw;
  double aa = (a[2] - a[0]) * (a[3] - a[1]), ab = (b[2] - b[0]) * (b[3] - b[1]);
  double uni = aa + ab - inter;
  if (!(aa > 0 && ab > 0 && uni > 0)) return false;
  return inter / uni > thr;
}

static kiln_status run_nms(const kiln_op_call *c) {
  kiln_status s = chk_nms(c->graph, c->node);
  if (!s) s = need(c, 0, "boxes", T_F32);
  if (!s) s = need(c, 1, "scores", T_F32);
  if (!s) s = want(c, 2, "max_output_boxes_per_class", T_IDX);
  if (!s) s = want(c, 3, "iou_threshold", T_F32);
  if (!s) s = want(c, 4, "score_threshold", T_F32);
  if (s) return s;
  const kiln_tensor *boxes = c->in[0], *scores = c->in[1];
  char b1[160], b2[160];
  if (boxes->rank != 3 || boxes->dims[2] != 4)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (boxes) has shape %s; [num_batches, num_boxes, 4] expected",
                     SHP(boxes, b1));
  if (scores->rank != 3 || scores->dims[0] != boxes->dims[0] || scores->dims[2] != boxes->dims[1])
    return kiln_fail(KILN_E_MISMATCH_SHAPE,
                     "input 1 (scores) has shape %s; boxes are %s, so [%lld, num_classes, %lld] expected",
                     SHP(scores, b1), SHP(boxes, b2), (long long)boxes->dims[0], (long long)boxes->dims[1]);
  int64_t max_out = 0;
  double iou_thr = 0, score_thr = 0;
  bool has_score_thr = false;
  if (kiln_opc_opt_in(c, 2) && (s = kiln_opc_scalar_i(c->in[2], 2, "max_output_boxes_per_class", &max_out))) return s;
  if (kiln_opc_opt_in(c, 3) && (s = kiln_opc_scalar_f(c->in[3], 3, "iou_threshold", &iou_thr))) return s;
  if (kiln_opc_opt_in(c, 4)) {
    if ((s = kiln_opc_scalar_f(c->in[4], 4, "score_threshold", &score_thr))) return s;
    has_score_thr = true;
  }
  if (!(iou_thr >= 0 && iou_thr <= 1))
    return kiln_fail(KILN_E_INVALID_VALUE, "iou_threshold %g is outside [0, 1]", iou_thr);
  if (max_out < 0) max_out = 0;
  bool center = kiln_attr_int(c->node, "center_point_box", 0) != 0;
  int64_t B = boxes->dims[0], S = boxes->dims[1], C = scores->dims[1];
  int64_t cap = max_out < S ? max_out : S;
  /* worst case: cap boxes for every batch and class */
  int64_t *res = kiln_malloc((size_t)(B * C * cap + 1) * 3 * sizeof *res);
  int64_t *order = kiln_malloc((size_t)(S + 1) * sizeof *order);
  int64_t *sel = kiln_malloc((size_t)(cap + 1) * sizeof *sel);
  double *corners = kiln_malloc((size_t)(S + 1) * 4 * sizeof *corners);
  int64_t nres = 0;
  if (!res || !order || !sel || !corners) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory for NonMaxSuppression over %lld boxes", (long long)S);
    goto done;
  }
  for (int64_t b = 0; b < B && cap > 0; b++) {
    for (int64_t i = 0; i < S; i++) nms_box(boxes, b, i, center, corners + 4 * i);
    for (int64_t cl = 0; cl < C; cl++) {
      nms_ctx ctx = {scores, (b * C + cl) * S};
      int64_t nc = 0;
      for (int64_t i = 0; i < S; i++) {
        double v = kiln_get_f(scores, ctx.base + i);
        if (!has_score_thr || v > score_thr) order[nc++] = i;
      }
      if ((s = stable_sort(order, nc, nms_cmp, &ctx))) goto done;
      int64_t ns = 0;
      for (int64_t k = 0; k < nc && ns < cap; k++) {
        int64_t i = order[k];
        bool keep = true;
        for (int64_t j = 0; j < ns && keep; j++)
          keep = !nms_suppresses(corners + 4 * i, corners + 4 * sel[j], iou_thr);
        if (!keep) continue;
        sel[ns++] = i;
        res[3 * nres] = b, res[3 * nres + 1] = cl, res[3 * nres + 2] = i;
        nres++;
      }
    }
  }
  int64_t od[2] = {nres, 3};
  if ((s = kiln_tensor_alloc(&c->out[0], KILN_I64, 2, od))) goto done;
  for (int64_t i = 0; i < 3 * nres; i++) kiln_set_i(&c->out[0], i, res[i]);
done:
  kiln_free(res);
  kiln_free(order);
  kiln_free(sel);
  kiln_free(corners);
  return s;
}

/* ------------------------------------------------------------------------ */
/* RoiAlign                                                                  */

static const char *const roi_modes[] = {"avg", "max", NULL};
static const char *const roi_ctms[] = {"half_pixel", "output_half_pixel", NULL};

static kiln_status chk_roialign(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 10, 0);
  if (!s) s = chk_attr_opset(n, "coordinate_transformation_mode", 16, 0);
  if (!s) s = chk_enum(n, "mode", "avg", roi_modes);
  if (!s) s = chk_enum(n, "coordinate_transformation_mode", "half_pixel", roi_ctms);
  if (!s) s = chk_decl(g, n, 0, "X", T_F3);
  if (!s) s = kiln_opc_chk_decl_same(g, n, 1, 0, "rois");
  if (!s) s = chk_decl(g, n, 2, "batch_indices", T_I64);
  if (s) return s;
  int64_t oh = kiln_attr_int(n, "output_height", 1), ow = kiln_attr_int(n, "output_width", 1);
  int64_t sr = kiln_attr_int(n, "sampling_ratio", 0);
  if (oh < 1 || ow < 1 || oh > (1 << 20) || ow > (1 << 20))
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "output_height %lld / output_width %lld must be >= 1", (long long)oh,
                     (long long)ow);
  if (sr < 0 || sr > (1 << 12))
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "sampling_ratio %lld must be >= 0 (and at most 4096)", (long long)sr);
  if (!isfinite(kiln_attr_float(n, "spatial_scale", 1.0f)))
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "spatial_scale is not finite");
  return KILN_OK;
}

/* Bilinear sample at (y, x) of one H x W plane, the onnxruntime way: zero
 * outside [-1, H] x [-1, W], else clamped to the plane. Returns the four
 * weighted corner terms in t[4]. */
static void roi_sample(const kiln_tensor *x, int64_t plane, int64_t H, int64_t W, double y, double xx,
                       double *t) {
  t[0] = t[1] = t[2] = t[3] = 0;
  if (y < -1.0 || y > (double)H || xx < -1.0 || xx > (double)W || H == 0 || W == 0) return;
  if (y <= 0) y = 0;
  if (xx <= 0) xx = 0;
  int64_t yl = (int64_t)y, xl = (int64_t)xx, yh, xh;
  if (yl >= H - 1) yh = yl = H - 1, y = (double)yl;
  else yh = yl + 1;
  if (xl >= W - 1) xh = xl = W - 1, xx = (double)xl;
  else xh = xl + 1;
  double ly = y - (double)yl, lx = xx - (double)xl, hy = 1 - ly, hx = 1 - lx;
  t[0] = hy * hx * kiln_get_f(x, plane + yl * W + xl);
  t[1] = hy * lx * kiln_get_f(x, plane + yl * W + xh);
  t[2] = ly * hx * kiln_get_f(x, plane + yh * W + xl);
  t[3] = ly * lx * kiln_get_f(x, plane + yh * W + xh);
}

static kiln_status run_roialign(const kiln_op_call *c) {
  const kiln_node *n = c->node;
  kiln_status s = chk_roialign(c->graph, n);
  if (!s) s = need(c, 0, "X", T_F3);
  if (!s) s = need(c, 1, "rois", T_F3);
  if (!s) s = kiln_opc_need_same(c, 1, 0, "rois");
  if (!s) s = need(c, 2, "batch_indices", T_IDX);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *rois = c->in[1], *bi = c->in[2];
  char b1[160], b2[160];
  if (x->rank != 4)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (X) has shape %s; (N, C, H, W) expected", SHP(x, b1));
  if (rois->rank != 2 || rois->dims[1] != 4)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 1 (rois) has shape %s; (num_rois, 4) expected", SHP(rois, b1));
  if (bi->rank != 1 || bi->dims[0] != rois->dims[0])
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 2 (batch_indices) has shape %s; rois are %s, so [%lld] expected",
                     SHP(bi, b1), SHP(rois, b2), (long long)rois->dims[0]);
  int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], R = rois->dims[0];
  int64_t ph = kiln_attr_int(n, "output_height", 1), pw = kiln_attr_int(n, "output_width", 1);
  int64_t sr = kiln_attr_int(n, "sampling_ratio", 0);
  double scale = kiln_attr_float(n, "spatial_scale", 1.0f);
  bool is_max = enum_index(n, "mode", "avg", roi_modes) == 1;
  bool half_pixel = c->opset >= 16 &&
                    enum_index(n, "coordinate_transformation_mode", "half_pixel", roi_ctms) == 0;
  double off = half_pixel ? 0.5 : 0.0;
  int64_t od[4] = {R, C, ph, pw};
  kiln_tensor *y = &c->out[0];
  if ((s = kiln_tensor_alloc(y, x->dtype, 4, od))) return s;
  for (int64_t r = 0; r < R; r++) {
    int64_t b = kiln_get_i(bi, r);
    if (b < 0 || b >= N)
      return kiln_fail(KILN_E_INVALID_VALUE, "batch_indices[%lld] is %lld; X has %lld images", (long long)r,
                       (long long)b, (long long)N);
    double x1 = kiln_get_f(rois, 4 * r) * scale - off, y1 = kiln_get_f(rois, 4 * r + 1) * scale - off;
    double x2 = kiln_get_f(rois, 4 * r + 2) * scale - off, y2 = kiln_get_f(rois, 4 * r + 3) * scale - off;
    if (!isfinite(x1) || !isfinite(y1) || !isfinite(x2) || !isfinite(y2))
      return kiln_fail(KILN_E_INVALID_VALUE, "roi %lld has a coordinate that is not finite", (long long)r);
    double rw = x2 - x1, rh = y2 - y1;
    if (!half_pixel) rw = fmax(rw, 1.0), rh = fmax(rh, 1.0);
    double bh = rh / (double)ph, bw = rw / (double)pw;
    double gh_d = sr > 0 ? (double)sr : ceil(rh / (double)ph), gw_d = sr > 0 ? (double)sr : ceil(rw / (double)pw);
    if (gh_d < 0) gh_d = 0;
    if (gw_d < 0) gw_d = 0;
    if (gh_d * gw_d > (double)(1 << 24))
      return kiln_fail(KILN_E_INVALID_VALUE, "roi %lld needs %g x %g samples per bin; at most 2^24 supported",
                       (long long)r, gh_d, gw_d);
    int64_t gh = (int64_t)gh_d, gw = (int64_t)gw_d;
    double count = gh * gw > 0 ? (double)(gh * gw) : 1.0;
    for (int64_t ch = 0; ch < C; ch++) {
      int64_t plane = (b * C + ch) * H * W;
      for (int64_t py = 0; py < ph; py++)
        for (int64_t px = 0; px < pw; px++) {
          double acc = 0;
          bool first = true;
          for (int64_t iy = 0; iy < gh; iy++) {
            double yy = y1 + (double)py * bh + ((double)iy + 0.5) * bh / (double)gh;
            for (int64_t ix = 0; ix < gw; ix++) {
              double xx = x1 + (double)px * bw + ((double)ix + 0.5) * bw / (double)gw;
              double t[4];
              roi_sample(x, plane, H, W, yy, xx, t);
              if (is_max) {
                double v = fmax(fmax(fmax(t[0], t[1]), t[2]), t[3]);
                acc = first ? v : fmax(acc, v);
                first = false;
              } else {
                acc += t[0] + t[1] + t[2] + t[3];
              }
            }
          }
          if (!is_max) acc /= count;
          kiln_set_f(y, ((r * C + ch) * ph + py) * pw + px, acc);
        }
    }
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* GridSample                                                                */

enum { GS_BILINEAR, GS_NEAREST, GS_BICUBIC };
static const char *const gs_modes[] = {"bilinear", "nearest", "bicubic", NULL};
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };
static const char *const gs_pads[] = {"zeros", "border", "reflection", NULL};

/* GridSample-16's T1 as far as kiln has it: floats but bfloat16, integers, bool */
#define T_GS_X (T_F3 | KILN_TS_INT | KILN_T(KILN_BOOL))

static kiln_status chk_gridsample(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 16, 0);
  if (!s) s = chk_enum(n, "mode", "bilinear", gs_modes);
  if (!s) s = chk_enum(n, "padding_mode", "zeros", gs_pads);
  if (!s) s = kiln_opc_flag(n, "align_corners", 0);
  if (!s) s = chk_decl(g, n, 0, "X", T_GS_X);
  if (!s) s = chk_decl(g, n, 1, "grid", T_F3);
  return s;
}

typedef struct gs_ctx {
  const kiln_tensor *x;
  int64_t plane, H, W;
  int pad;
  bool ac;
} gs_ctx;

static double gs_unnormalize(double v, int64_t size, bool ac) {
  return ac ? (v + 1) / 2 * (double)(size - 1) : ((v + 1) * (double)size - 1) / 2;
}

static double gs_reflect(double v, double twice_lo, double twice_hi) {
  if (twice_lo == twice_hi) return 0;
  double lo = twice_lo / 2, span = (twice_hi - twice_lo) / 2;
  v = fabs(v - lo);
  double extra = fmod(v, span), flips = floor(v / span);
  return fmod(flips, 2.0) == 0 ? extra + lo : span - extra + lo;
}

/* The padding mode applied to a coordinate (torch's compute_coordinates). */
static double gs_pad(const gs_ctx *g, double v, int64_t size) {
  if (g->pad == GS_BORDER) return fmin((double)(size - 1), fmax(v, 0));
  if (g->pad == GS_REFLECTION) {
    v = g->ac ? gs_reflect(v, 0, 2.0 * (double)(size - 1)) : gs_reflect(v, -1, 2.0 * (double)size - 1);
    return fmin((double)(size - 1), fmax(v, 0));
  }
  return v;
}

/* X at integer (iy, ix) when inside, else 0. */
static double gs_at(const gs_ctx *g, int64_t iy, int64_t ix) {
  if (iy < 0 || iy >= g->H || ix < 0 || ix >= g->W) return 0;
  return kiln_get_f(g->x, g->plane + iy * g->W + ix);
}

static double gs_at_f(const gs_ctx *g, double y, double x) {
  int64_t iy, ix;
  if (!to_index(floor(y), &iy) || !to_index(floor(x), &ix)) return 0;
  return gs_at(g, iy, ix);
}

/* A bicubic tap: the padding mode applied to the integer position. */
static double gs_bounded(const gs_ctx *g, double y, double x) {
  double py = gs_pad(g, y, g->H), px = gs_pad(g, x, g->W);
  int64_t iy, ix;
  if (!to_index(py, &iy) || !to_index(px, &ix)) return 0; /* truncation, as torch's cast */
  return gs_at(g, iy, ix);
}

static double gs_cubic(double v0, double v1, double v2, double v3, double t) {
  double w[4];
  cubic_coeffs(t, -0.75, w);
  return v0 * w[0] + v1 * w[1] + v2 * w[2] + v3 * w[3];
}

/* Nearest: the flat index in X of the element grid point (gx, gy) picks
 * (rounded half to even after the padding mode), -1 outside X (zeros). */
static int64_t gs_nearest(const gs_ctx *g, double gx, double gy) {
  double ix = gs_pad(g, gs_unnormalize(gx, g->W, g->ac), g->W), iy = gs_pad(g, gs_unnormalize(gy, g->H, g->ac), g->H);
  int64_t y, x;
  if (!to_index(round_half_even(iy), &y) || !to_index(round_half_even(ix), &x)) return -1;
  if (y < 0 || y >= g->H || x < 0 || x >= g->W) return -1;
  return g->plane + y * g->W + x;
}

/* Bilinear or bicubic, in double. */
static double gs_sample(const gs_ctx *g, int mode, double gx, double gy) {
  double ix = gs_unnormalize(gx, g->W, g->ac), iy = gs_unnormalize(gy, g->H, g->ac);
  if (mode == GS_BICUBIC) {
    double fx = floor(ix), fy = floor(iy), tx = ix - fx, ty = iy - fy;
    if (!isfinite(fx) || !isfinite(fy)) return 0;
    double rows[4];
    for (int i = 0; i < 4; i++) {
      double yy = fy - 1 + i;
      rows[i] = gs_cubic(gs_bounded(g, yy, fx - 1), gs_bounded(g, yy, fx), gs_bounded(g, yy, fx + 1),
                         gs_bounded(g, yy, fx + 2), tx);
    }
    return gs_cubic(rows[0], rows[1], rows[2], rows[3], ty);
  }
  ix = gs_pad(g, ix, g->W);
  iy = gs_pad(g, iy, g->H);
  double x0 = floor(ix), y0 = floor(iy);
  if (!isfinite(x0) || !isfinite(y0)) return 0;
  double x1 = x0 + 1, y1 = y0 + 1;
  double v = 0;
  double wnw = (x1 - ix) * (y1 - iy), wne = (ix - x0) * (y1 - iy);
  double wsw = (x1 - ix) * (iy - y0), wse = (ix - x0) * (iy - y0);
  v += wnw * gs_at_f(g, y0, x0);
  v += wne * gs_at_f(g, y0, x1);
  v += wsw * gs_at_f(g, y1, x0);
  v += wse * gs_at_f(g, y1, x1);
  return v;
}

static kiln_status run_gridsample(const kiln_op_call *c) {
  const kiln_node *n = c->node;
  kiln_status s = chk_gridsample(c->graph, n);
  if (!s) s = need(c, 0, "X", T_GS_X);
  if (!s) s = need(c, 1, "grid", T_F3);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *grid = c->in[1];
  char b1[160], b2[160];
  if (x->rank != 4)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (X) has shape %s; (N, C, H, W) expected", SHP(x, b1));
  if (grid->rank != 4 || grid->dims[0] != x->dims[0] || grid->dims[3] != 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 1 (grid) has shape %s; X is %s, so (%lld, H_out, W_out, 2) expected",
                     SHP(grid, b1), SHP(x, b2), (long long)x->dims[0]);
  int64_t N = x->dims[0], C = x->dims[1], Ho = grid->dims[1], Wo = grid->dims[2];
  int64_t od[4] = {N, C, Ho, Wo};
  kiln_tensor *y = &c->out[0];
  if ((s = kiln_tensor_alloc(y, x->dtype, 4, od))) return s;
  gs_ctx g = {x, 0, x->dims[2], x->dims[3], enum_index(n, "padding_mode", "zeros", gs_pads),
              kiln_attr_int(n, "align_corners", 0) != 0};
  int mode = enum_index(n, "mode", "bilinear", gs_modes);
  for (int64_t b = 0; b < N; b++)
    for (int64_t ch = 0; ch < C; ch++) {
      g.plane = (b * C + ch) * g.H * g.W;
      for (int64_t i = 0; i < Ho * Wo; i++) {
        int64_t go = (b * Ho * Wo + i) * 2, o = (b * C + ch) * Ho * Wo + i;
        double gx = kiln_get_f(grid, go), gy = kiln_get_f(grid, go + 1);
        if (mode == GS_NEAREST) { /* X's value itself: exact for every type (int64 past 2^53 too) */
          int64_t k = gs_nearest(&g, gx, gy);
          if (k < 0) kiln_set_f(y, o, 0);
          else kiln_copy_elem(y, o, x, k);
        } else {
          kiln_set_f(y, o, gs_sample(&g, mode, gx, gy));
        }
      }
    }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Unique                                                                    */

static kiln_status chk_unique(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 11, 0);
  if (!s) s = kiln_opc_flag(n, "sorted", 0);
  if (!s) s = chk_decl(g, n, 0, "X", T_NUMB);
  if (s) return s;
  int r = kiln_opc_decl_rank(g, n, 0);
  int64_t axis = kiln_attr_int(n, "axis", 0);
  if (r >= 0 && kiln_node_attr(n, "axis") && (axis < -r || axis >= r))
    return kiln_fail(KILN_E_MODEL, "axis %lld is out of range for an input of rank %d", (long long)axis, r);
  return KILN_OK;
}

/* Slice m of x along the axis: element p (of outer * inner) is at
 * ((p / inner) * M + m) * inner + p % inner. Without an axis, M = numel
 * and slices are single elements (outer = inner = 1). */
typedef struct uq_ctx {
  const kiln_tensor *x;
  int64_t M, outer, inner;
} uq_ctx;

static int64_t uq_at(const uq_ctx *u, int64_t m, int64_t p) {
  return ((p / u->inner) * u->M + m) * u->inner + p % u->inner;
}

/* Three-way comparison of two elements; NaN above every number, equal to
 * NaN. */
static int elem_cmp(const kiln_tensor *t, int64_t a, int64_t b) {
  if (kiln_dtype_is_float(t->dtype)) {
    double x = kiln_get_f(t, a), y = kiln_get_f(t, b);
    if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);
    return (x > y) - (x < y);
  }
  if (t->dtype == KILN_U64) {
    uint64_t x = (uint64_t)kiln_get_i(t, a), y = (uint64_t)kiln_get_i(t, b);
    return (x > y) - (x < y);
  }
  int64_t x = kiln_get_i(t, a), y = kiln_get_i(t, b);
  return (x > y) - (x < y);
}

static int uq_cmp(const void *ctx, int64_t a, int64_t b) {
  const uq_ctx *u = ctx;
  for (int64_t p = 0; p < u->outer * u->inner; p++) {
    int r = elem_cmp(u->x, uq_at(u, a, p), uq_at(u, b, p));
    if (r) return r;
  }
  return 0;
}

static int int_cmp(const void *ctx, int64_t a, int64_t b) {
  (void)ctx;
  return (a > b) - (a < b);
}

static kiln_status run_unique(const kiln_op_call *c) {
  const kiln_node *n = c->node;
  kiln_status s = chk_unique(c->graph, n);
  if (!s) s = need(c, 0, "X", T_NUMB);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  bool has_axis = kiln_node_attr(n, "axis") != NULL;
  bool sorted = kiln_attr_int(n, "sorted", 1) != 0;
  uq_ctx u = {x, x->numel, 1, 1};
  int axis = 0;
  if (has_axis) {
    int64_t a = kiln_attr_int(n, "axis", 0);
    char b[160];
    if (a < -x->rank || a >= x->rank)
      return kiln_fail(KILN_E_INVALID_VALUE, "axis %lld is out of range for input X of shape %s", (long long)a,
                       SHP(x, b));
    axis = (int)(a < 0 ? a + x->rank : a);
    u.M = x->dims[axis];
    for (int d = 0; d < axis; d++) u.outer *= x->dims[d];
    for (int d = axis + 1; d < x->rank; d++) u.inner *= x->dims[d];
  }
  int64_t M = u.M;
  size_t sz = (size_t)(M + 1) * sizeof(int64_t);
  int64_t *order = kiln_malloc(sz), *first = kiln_malloc(sz), *count = kiln_malloc(sz);
  int64_t *group = kiln_malloc(sz), *rank = kiln_malloc(sz), *perm = kiln_malloc(sz);
  int64_t G = 0;
  if (!order || !first || !count || !group || !rank || !perm) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory for Unique over %lld slices", (long long)M);
    goto done;
  }
  for (int64_t m = 0; m < M; m++) order[m] = m;
  if ((s = stable_sort(order, M, uq_cmp, &u))) goto done;
  /* groups in sorted order; the first member of each is its first
   * occurrence (the sort is stable) */
  for (int64_t k = 0; k < M; k++) {
    if (k == 0 || uq_cmp(&u, order[k - 1], order[k]) != 0) {
      first[G] = order[k];
      count[G] = 0;
      G++;
    }
    count[G - 1]++;
    group[order[k]] = G - 1;
  }
  /* output position of each group: sorted order, or first occurrence */
  for (int64_t gi = 0; gi < G; gi++) perm[gi] = gi;
  if (!sorted) {
    /* order group ids by first occurrence: sort the first indices, then map */
    for (int64_t gi = 0; gi < G; gi++) perm[gi] = first[gi];
    if ((s = stable_sort(perm, G, int_cmp, NULL))) goto done;
    /* perm[k] = first index of the k-th group in output order; find groups */
    for (int64_t k = 0; k < G; k++) perm[k] = group[perm[k]];
  }
  for (int64_t k = 0; k < G; k++) rank[perm[k]] = k;
  /* Y */
  int64_t yd[KILN_MAX_RANK];
  int yr = has_axis ? x->rank : 1;
  if (has_axis) {
    for (int d = 0; d < x->rank; d++) yd[d] = x->dims[d];
    yd[axis] = G;
  } else {
    yd[0] = G;
  }
  kiln_tensor *y = &c->out[0];
  if ((s = kiln_tensor_alloc(y, x->dtype, yr, yd))) goto done;
  uq_ctx uy = {y, G, u.outer, u.inner};
  for (int64_t k = 0; k < G; k++)
    for (int64_t p = 0; p < u.outer * u.inner; p++) kiln_copy_elem(y, uq_at(&uy, k, p), x, uq_at(&u, first[perm[k]], p));
  if (c->n_out > 1 && c->out_used[1]) {
    if ((s = kiln_tensor_alloc(&c->out[1], KILN_I64, 1, &G))) goto done;
    for (int64_t k = 0; k < G; k++) kiln_set_i(&c->out[1], k, first[perm[k]]);
  }
  if (c->n_out > 2 && c->out_used[2]) {
    if ((s = kiln_tensor_alloc(&c->out[2], KILN_I64, 1, &M))) goto done;
    for (int64_t m = 0; m < M; m++) kiln_set_i(&c->out[2], m, rank[group[m]]);
  }
  if (c->n_out > 3 && c->out_used[3]) {
    if ((s = kiln_tensor_alloc(&c->out[3], KILN_I64, 1, &G))) goto done;
    for (int64_t k = 0; k < G; k++) kiln_set_i(&c->out[3], k, count[perm[k]]);
  }
done:
  kiln_free(order);
  kiln_free(first);
  kiln_free(count);
  kiln_free(group);
  kiln_free(rank);
  kiln_free(perm);
  return s;
}

/* ------------------------------------------------------------------------ */

const kiln_op_def kiln_ref_ops_extra[] = {
    {"NegativeLogLikelihoodLoss", 2, 3, 1, 1, "reduction ignore_index", T_F3, run_loss, chk_loss},
    {"SoftmaxCrossEntropyLoss", 2, 3, 1, 2, "reduction ignore_index", T_F3 | T_BF, run_loss, chk_loss},
    {"Resize", 1, 4, 1, 1,
     "mode coordinate_transformation_mode cubic_coeff_a exclude_outside extrapolation_value nearest_mode",
     T_NUMB | T_BF, run_resize, chk_resize},
    {"Upsample", 1, 2, 1, 1, "mode scales", T_NUMB, run_upsample, chk_upsample},
    {"QuantizeLinear", 2, 3, 1, 1, "axis", T_F32 | KILN_T(KILN_I32), run_quantize, chk_qdq},
    {"DequantizeLinear", 2, 3, 1, 1, "axis", T_Q8 | KILN_T(KILN_I32), run_dequantize, chk_qdq},
    {"DynamicQuantizeLinear", 1, 1, 3, 3, "", T_F32, run_dynq, chk_dynq},
    {"HannWindow", 1, 1, 1, 1, "output_datatype periodic", T_IDX, run_window, chk_window},
    {"HammingWindow", 1, 1, 1, 1, "output_datatype periodic", T_IDX, run_window, chk_window},
    {"BlackmanWindow", 1, 1, 1, 1, "output_datatype periodic", T_IDX, run_window, chk_window},
    {"NonMaxSuppression", 2, 5, 1, 1, "center_point_box", T_F32, run_nms, chk_nms},
    {"RoiAlign", 3, 3, 1, 1, "coordinate_transformation_mode mode output_height output_width sampling_ratio spatial_scale",
     T_F3, run_roialign, chk_roialign},
    {"GridSample", 2, 2, 1, 1, "align_corners mode padding_mode", T_GS_X, run_gridsample, chk_gridsample},
    {"Unique", 1, 1, 1, 4, "axis sorted", T_NUMB, run_unique, chk_unique},
    {0},
};
