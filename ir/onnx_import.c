/* ir/onnx_import: ModelProto -> kiln_graph. */
#include "ir/onnx_import.h"

#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "onnx/onnx.pb-c.h"

/* ---- protobuf-c's allocations go through kiln's allocator ---- */

/* Set when an allocation of the current unpack failed: a NULL unpack is
 * then out of memory, not bad bytes. */
static _Thread_local int pb_alloc_failed;

static void *pb_alloc(void *data, size_t n) {
  (void)data;
  void *p = kiln_malloc(n);
  if (!p) pb_alloc_failed = 1;
  return p;
}

static void pb_free(void *data, void *p) {
  (void)data;
  kiln_free(p);
}

static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

/* ---- name -> value index map (open addressing, power-of-two capacity) ---- */

typedef struct name_map {
  const char **keys;
  int *vals;
  size_t cap;
} name_map;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
  return h;
}

static kiln_status map_init(name_map *m, size_t expected) {
  m->cap = 16;
  while (m->cap < expected * 2) m->cap <<= 1;
  m->keys = kiln_calloc(m->cap, sizeof *m->keys);
  m->vals = kiln_calloc(m->cap, sizeof *m->vals);
  if (!m->keys || !m->vals) return kiln_fail(KILN_E_NOMEM, "out of memory importing the model");
  return KILN_OK;
}

static void map_free(name_map *m) {
  kiln_free(m->keys);
  kiln_free(m->vals);
}

static int map_get(const name_map *m, const char *k) {
  for (size_t i = hash_str(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->keys[i]) return -1;
    if (!strcmp(m->keys[i], k)) return m->vals[i];
  }
}

/* Caller guarantees k is absent and capacity suffices (sized from counts). */
static void map_put(name_map *m, const char *k, int v) {
  size_t i = hash_str(k) & (m->cap - 1);
  while (m->keys[i]) i = (i + 1) & (m->cap - 1);
  m->keys[i] = k;
  m->vals[i] = v;
}

/* ---- tensors ---- */

/* Values stored in tp's typed field for dt (raw_data aside). */
static size_t stored_count(const Onnx__TensorProto *tp, kiln_dtype dt) {
  switch (dt) {
  case KILN_F32: return tp->n_float_data;
  case KILN_F64: return tp->n_double_data;
  case KILN_I64: return tp->n_int64_data;
  case KILN_U32:
  case KILN_U64: return tp->n_uint64_data;
  default: return tp->n_int32_data; /* f16, bf16, int32, int16, int8, uint16, uint8, bool */
  }
}

/* tp's data as t's storage without a copy: protobuf-c copied each bytes
 * field and each repeated field into a block of its own from our allocator
 * (pb_alloc, kiln_malloc), so t takes that block (owned, freed by
 * kiln_tensor_release) and tp forgets it (free_unpacked skips a NULL
 * pointer). True when taken; false when dt is stored elsewhere or needs a
 * conversion (then the caller copies). */
static bool take_data(Onnx__TensorProto *tp, kiln_dtype dt, int64_t n, size_t bytes, kiln_tensor *t) {
  void **field = NULL;
  if (!bytes) return false;
  if (tp->has_raw_data) field = (void **)&tp->raw_data.data;
  else if (dt == KILN_F32 && (int64_t)tp->n_float_data == n) field = (void **)&tp->float_data;
  else if (dt == KILN_F64 && (int64_t)tp->n_double_data == n) field = (void **)&tp->double_data;
  else if (dt == KILN_I64 && (int64_t)tp->n_int64_data == n) field = (void **)&tp->int64_data;
  if (!field || !*field) return false;
  kiln_tensor_wrap(t, dt, (int)tp->n_dims, tp->dims, n, *field);
  t->owns = true;
  *field = NULL;
  if (tp->has_raw_data) tp->raw_data.len = 0;
  else if (dt == KILN_F32) tp->n_float_data = 0;
  else if (dt == KILN_F64) tp->n_double_data = 0;
  else tp->n_int64_data = 0;
  return true;
}

/* Fills t from tp; t may take tp's data (take_data): tp is used once. */
static kiln_status tensor_from_proto(Onnx__TensorProto *tp, kiln_tensor *t) {
  const char *nm = tp->name ? tp->name : "";
  kiln_dtype dt = (kiln_dtype)(tp->has_data_type ? tp->data_type : 0);
  if (dt == KILN_STRING)
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "tensor '%s': string tensors cannot cross the ONNXIFI ABI", nm);
  if (!kiln_dtype_supported(dt))
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "tensor '%s': data type %s (%d) is not supported", nm,
                     kiln_dtype_name(dt), (int)dt);
  if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "tensor '%s': external data is not supported", nm);
  if (tp->segment) return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "tensor '%s': segmented tensors are not supported", nm);
  if (tp->n_dims > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "tensor '%s': rank %zu exceeds kiln's maximum of %d", nm,
                     tp->n_dims, KILN_MAX_RANK);
  /* the data present must match the shape before anything is allocated for
     it: a hostile shape with no data must not reserve its bytes */
  int64_t n;
  kiln_status s = kiln_shape_numel((int)tp->n_dims, tp->dims, &n);
  if (s) {
    kiln_error_prefix("tensor '%s'", nm);
    return s;
  }
  size_t es = kiln_dtype_size(dt), bytes = (size_t)n * es;
  size_t have = tp->has_raw_data ? tp->raw_data.len / (es ? es : 1) : stored_count(tp, dt);
  if (tp->has_raw_data ? tp->raw_data.len != bytes : (int64_t)have != n) {
    if (tp->has_raw_data)
      return kiln_fail(KILN_E_MODEL, "tensor '%s': raw_data has %zu bytes, its shape needs %zu", nm,
                       tp->raw_data.len, bytes);
    return kiln_fail(KILN_E_MODEL, "tensor '%s': %zu values stored, its shape needs %lld", nm, have, (long long)n);
  }
  if (take_data(tp, dt, n, bytes, t)) return KILN_OK;
  s = kiln_tensor_alloc(t, dt, (int)tp->n_dims, tp->dims);
  if (s) {
    kiln_error_prefix("tensor '%s'", nm);
    return s;
  }
  if (tp->has_raw_data) {
    if (tp->raw_data.len != bytes) {
      kiln_tensor_release(t);
      return kiln_fail(KILN_E_MODEL, "tensor '%s': raw_data has %zu bytes, its shape needs %zu", nm,
                       tp->raw_data.len, bytes);
    }
    if (bytes) memcpy(t->data, tp->raw_data.data, bytes);
    return KILN_OK;
  }
  switch (dt) {
  case KILN_F32:
    have = tp->n_float_data;
    if ((int64_t)have == n && n) memcpy(t->data, tp->float_data, bytes);
    break;
  case KILN_F64:
    have = tp->n_double_data;
    if ((int64_t)have == n && n) memcpy(t->data, tp->double_data, bytes);
    break;
  case KILN_I64:
    have = tp->n_int64_data;
    if ((int64_t)have == n && n) memcpy(t->data, tp->int64_data, bytes);
    break;
  case KILN_U32:
  case KILN_U64:
    have = tp->n_uint64_data;
    if ((int64_t)have == n)
      for (int64_t i = 0; i < n; i++) kiln_set_i(t, i, (int64_t)tp->uint64_data[i]);
    break;
  case KILN_F16:
  case KILN_BF16:
    have = tp->n_int32_data;
    if ((int64_t)have == n)
      for (int64_t i = 0; i < n; i++) ((uint16_t *)t->data)[i] = (uint16_t)tp->int32_data[i];
    break;
  default: /* int32, int16, int8, uint16, uint8, bool */
    have = tp->n_int32_data;
    if ((int64_t)have == n)
      for (int64_t i = 0; i < n; i++) kiln_set_i(t, i, tp->int32_data[i]);
    break;
  }
  if ((int64_t)have != n) {
    kiln_tensor_release(t);
    return kiln_fail(KILN_E_MODEL, "tensor '%s': %zu values stored, its shape needs %lld", nm, have,
                     (long long)n);
  }
  return KILN_OK;
}

kiln_status kiln_tensor_parse(const void *bytes, size_t size, kiln_tensor *out, char **name) {
  pb_alloc_failed = 0;
  Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&pb_allocator, size, bytes);
  if (!tp && pb_alloc_failed) return kiln_fail(KILN_E_NOMEM, "out of memory parsing a TensorProto of %zu bytes", size);
  if (!tp) return kiln_fail(KILN_E_PROTOBUF, "bytes do not parse as an ONNX TensorProto");
  kiln_status s = tensor_from_proto(tp, out);
  if (!s && name) {
    *name = tp->name ? kiln_strdup(tp->name) : NULL;
    if (tp->name && !*name) {
      kiln_tensor_release(out);
      s = kiln_fail(KILN_E_NOMEM, "out of memory");
    }
  }
  onnx__tensor_proto__free_unpacked(tp, &pb_allocator);
  return s;
}

/* ---- types ---- */

static kiln_status type_from_proto(const Onnx__TypeProto *tp, kiln_type *ty, const char *vname) {
  ty->kind = KILN_TYPE_UNKNOWN;
  ty->dtype = KILN_UNDEFINED;
  ty->rank = -1;
  if (!tp) return KILN_OK;
  switch (tp->value_case) {
  case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE: break;
  case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE: ty->kind = KILN_TYPE_SEQUENCE; return KILN_OK;
  case ONNX__TYPE_PROTO__VALUE_MAP_TYPE: ty->kind = KILN_TYPE_MAP; return KILN_OK;
  case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE: ty->kind = KILN_TYPE_OPTIONAL; return KILN_OK;
  case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE: ty->kind = KILN_TYPE_SPARSE; return KILN_OK;
  default: return KILN_OK;
  }
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  ty->kind = KILN_TYPE_TENSOR;
  if (tt->has_elem_type) ty->dtype = (kiln_dtype)tt->elem_type;
  if (!tt->shape) return KILN_OK;
  if (tt->shape->n_dim > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "value '%s': rank %zu exceeds kiln's maximum of %d", vname,
                     tt->shape->n_dim, KILN_MAX_RANK);
  ty->rank = (int)tt->shape->n_dim;
  for (int i = 0; i < ty->rank; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    ty->dims[i].value = -1;
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (d->dim_value < 0)
        return kiln_fail(KILN_E_MODEL, "value '%s': dim %d is negative (%lld)", vname, i, (long long)d->dim_value);
      ty->dims[i].value = d->dim_value;
    } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param &&
               *d->dim_param) {
      ty->dims[i].param = kiln_strdup(d->dim_param);
      if (!ty->dims[i].param) return kiln_fail(KILN_E_NOMEM, "out of memory");
    }
  }
  return KILN_OK;
}

/* ---- attributes ---- */

static kiln_status attr_from_proto(const Onnx__AttributeProto *ap, kiln_attr *a) {
  a->name = kiln_strdup(ap->name ? ap->name : "");
  if (!a->name) return kiln_fail(KILN_E_NOMEM, "out of memory");
  if (ap->ref_attr_name && *ap->ref_attr_name)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute '%s' refers to a function attribute", a->name);
  int type = ap->has_type ? (int)ap->type : 0;
  if (!type) { /* IR < 3 models may omit the type: infer it from the field set */
    if (ap->has_f) type = KILN_ATTR_FLOAT;
    else if (ap->has_i) type = KILN_ATTR_INT;
    else if (ap->has_s) type = KILN_ATTR_STRING;
    else if (ap->t) type = KILN_ATTR_TENSOR;
    else if (ap->g) type = KILN_ATTR_GRAPH;
    else if (ap->n_floats) type = KILN_ATTR_FLOATS;
    else if (ap->n_ints) type = KILN_ATTR_INTS;
    else if (ap->n_strings) type = KILN_ATTR_STRINGS;
  }
  a->type = (kiln_attr_type)type;
  switch (type) {
  case KILN_ATTR_FLOAT: a->f = ap->f; break;
  case KILN_ATTR_INT: a->i = ap->i; break;
  case KILN_ATTR_STRING:
    a->s = kiln_strndup((const char *)ap->s.data, ap->s.len);
    if (!a->s) return kiln_fail(KILN_E_NOMEM, "out of memory");
    break;
  case KILN_ATTR_FLOATS:
    a->n = ap->n_floats;
    if (a->n) {
      a->floats = kiln_malloc(a->n * sizeof(float));
      if (!a->floats) return kiln_fail(KILN_E_NOMEM, "out of memory");
      memcpy(a->floats, ap->floats, a->n * sizeof(float));
    }
    break;
  case KILN_ATTR_INTS:
    a->n = ap->n_ints;
    if (a->n) {
      a->ints = kiln_malloc(a->n * sizeof(int64_t));
      if (!a->ints) return kiln_fail(KILN_E_NOMEM, "out of memory");
      memcpy(a->ints, ap->ints, a->n * sizeof(int64_t));
    }
    break;
  case KILN_ATTR_STRINGS:
    a->strings = kiln_calloc(ap->n_strings, sizeof(char *));
    if (!a->strings) return kiln_fail(KILN_E_NOMEM, "out of memory");
    a->n = ap->n_strings;
    for (size_t k = 0; k < a->n; k++) {
      a->strings[k] = kiln_strndup((const char *)ap->strings[k].data, ap->strings[k].len);
      if (!a->strings[k]) return kiln_fail(KILN_E_NOMEM, "out of memory");
    }
    break;
  case KILN_ATTR_TENSOR: {
    if (!ap->t) return kiln_fail(KILN_E_MODEL, "attribute '%s' of type TENSOR has no tensor", a->name);
    a->t = kiln_calloc(1, sizeof *a->t);
    if (!a->t) return kiln_fail(KILN_E_NOMEM, "out of memory");
    kiln_status s = tensor_from_proto(ap->t, a->t);
    if (s) {
      kiln_error_prefix("attribute '%s'", a->name);
      return s;
    }
    break;
  }
  default:
    /* graphs, sparse tensors, type protos: kept as a typed marker only; the
     * op tables reject nodes that need them. */
    break;
  }
  return KILN_OK;
}

/* ---- the model ---- */

typedef struct importer {
  kiln_graph *g;
  name_map names;
  int cap_values;
} importer;

static int add_value(importer *im, const char *name, kiln_status *s) {
  kiln_graph *g = im->g;
  if (g->n_values >= im->cap_values) {
    *s = kiln_fail(KILN_E_INTERNAL, "value table overflow");
    return -1;
  }
  kiln_value *v = &g->values[g->n_values];
  v->name = kiln_strdup(name);
  if (!v->name) {
    *s = kiln_fail(KILN_E_NOMEM, "out of memory");
    return -1;
  }
  v->producer = -1;
  v->type.rank = -1;
  map_put(&im->names, v->name, g->n_values);
  return g->n_values++;
}

static kiln_status import_graph(importer *im, const Onnx__ModelProto *mp) {
  kiln_graph *g = im->g;
  const Onnx__GraphProto *gp = mp->graph;
  kiln_status s = KILN_OK;

  if (gp->n_sparse_initializer)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "sparse initializers are not supported");
  if (gp->n_node > KILN_MAX_NODES || gp->n_initializer > KILN_MAX_INITIALIZERS || gp->n_input > KILN_MAX_GRAPH_IO ||
      gp->n_output > KILN_MAX_GRAPH_IO)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE,
                     "graph too large (%zu nodes, %zu initializers, %zu inputs, %zu outputs; kiln's limits are "
                     "%d, %d, %d, %d)",
                     gp->n_node, gp->n_initializer, gp->n_input, gp->n_output, KILN_MAX_NODES,
                     KILN_MAX_INITIALIZERS, KILN_MAX_GRAPH_IO, KILN_MAX_GRAPH_IO);

  size_t cap = gp->n_input + gp->n_initializer + gp->n_output;
  for (size_t i = 0; i < gp->n_node && cap <= KILN_MAX_VALUES; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    if (np->n_output > KILN_MAX_VALUES) cap = (size_t)KILN_MAX_VALUES + 1;
    else cap += np->n_output;
    if (np->n_attribute > KILN_MAX_NODE_ATTRS)
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "node '%s' (%s) has %zu attributes, more than kiln's limit of %d",
                       np->name ? np->name : "", np->op_type ? np->op_type : "", np->n_attribute,
                       KILN_MAX_NODE_ATTRS);
  }
  if (cap > KILN_MAX_VALUES)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "graph too large: more than %d named values, kiln's limit",
                     KILN_MAX_VALUES);
  im->cap_values = (int)cap;
  g->values = kiln_calloc(cap ? cap : 1, sizeof *g->values);
  g->nodes = kiln_calloc(gp->n_node ? gp->n_node : 1, sizeof *g->nodes);
  g->inputs = kiln_calloc(gp->n_input ? gp->n_input : 1, sizeof(int));
  g->outputs = kiln_calloc(gp->n_output ? gp->n_output : 1, sizeof(int));
  if (!g->values || !g->nodes || !g->inputs || !g->outputs) return kiln_fail(KILN_E_NOMEM, "out of memory");
  if ((s = map_init(&im->names, cap))) return s;

  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    const char *nm = vi->name ? vi->name : "";
    if (!*nm) return kiln_fail(KILN_E_MODEL, "graph input %zu has no name", i);
    if (map_get(&im->names, nm) >= 0) return kiln_fail(KILN_E_MODEL, "graph input '%s' is listed twice", nm);
    int v = add_value(im, nm, &s);
    if (v < 0) return s;
    if ((s = type_from_proto(vi->type, &g->values[v].type, nm))) return s;
    g->values[v].is_input = true;
    g->inputs[g->n_inputs++] = v;
  }
  for (size_t i = 0; i < gp->n_initializer; i++) {
    Onnx__TensorProto *tp = gp->initializer[i];
    const char *nm = tp->name ? tp->name : "";
    if (!*nm) return kiln_fail(KILN_E_MODEL, "initializer %zu has no name", i);
    int v = map_get(&im->names, nm);
    if (v >= 0 && g->values[v].init) return kiln_fail(KILN_E_MODEL, "initializer '%s' is given twice", nm);
    if (v < 0 && (v = add_value(im, nm, &s)) < 0) return s;
    kiln_value *val = &g->values[v];
    val->init = kiln_calloc(1, sizeof *val->init);
    if (!val->init) return kiln_fail(KILN_E_NOMEM, "out of memory");
    if ((s = tensor_from_proto(tp, val->init))) return s;
    if (val->type.kind == KILN_TYPE_UNKNOWN) {
      val->type.kind = KILN_TYPE_TENSOR;
      val->type.dtype = val->init->dtype;
      val->type.rank = val->init->rank;
      for (int d = 0; d < val->init->rank; d++) val->type.dims[d].value = val->init->dims[d];
    }
  }

  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    kiln_node *n = &g->nodes[g->n_nodes++];
    n->src = (int)i;
    n->name = kiln_strdup(np->name ? np->name : "");
    n->op_type = kiln_strdup(np->op_type ? np->op_type : "");
    n->domain = kiln_strdup(np->domain ? np->domain : "");
    n->in = kiln_calloc(np->n_input ? np->n_input : 1, sizeof(int));
    n->out = kiln_calloc(np->n_output ? np->n_output : 1, sizeof(int));
    n->attrs = kiln_calloc(np->n_attribute ? np->n_attribute : 1, sizeof *n->attrs);
    if (!n->name || !n->op_type || !n->domain || !n->in || !n->out || !n->attrs)
      return kiln_fail(KILN_E_NOMEM, "out of memory");
    char lbl[256];
    kiln_node_label(g, n, lbl, sizeof lbl);
    if (!*n->op_type) return kiln_fail(KILN_E_MODEL, "node %s has no op_type", lbl);
    int64_t ver = kiln_graph_opset(g, n->domain);
    if (ver < 0)
      return kiln_fail(KILN_E_MODEL, "node %s (%s): no opset is imported for domain '%s'", lbl, n->op_type,
                       n->domain);
    n->opset = (int)ver;
    for (size_t k = 0; k < np->n_attribute; k++) {
      n->n_attrs++;
      if ((s = attr_from_proto(np->attribute[k], &n->attrs[k]))) {
        kiln_error_prefix("node %s (%s)", lbl, n->op_type);
        return s;
      }
      for (size_t j = 0; j < k; j++)
        if (!strcmp(n->attrs[j].name, n->attrs[k].name))
          return kiln_fail(KILN_E_MODEL, "node %s (%s): attribute '%s' given twice", lbl, n->op_type,
                           n->attrs[k].name);
    }
    for (size_t k = 0; k < np->n_input; k++) {
      const char *nm = np->input[k];
      n->n_in++;
      if (!nm || !*nm) {
        n->in[k] = -1;
        continue;
      }
      int v = map_get(&im->names, nm);
      if (v < 0)
        return kiln_fail(KILN_E_MODEL,
                         "node %s (%s): input '%s' is not a graph input, an initializer or an output of an "
                         "earlier node",
                         lbl, n->op_type, nm);
      n->in[k] = v;
    }
    for (size_t k = 0; k < np->n_output; k++) {
      const char *nm = np->output[k];
      n->n_out++;
      if (!nm || !*nm) {
        n->out[k] = -1;
        continue;
      }
      if (map_get(&im->names, nm) >= 0)
        return kiln_fail(KILN_E_MODEL, "node %s (%s): output '%s' is already defined (names must be unique)",
                         lbl, n->op_type, nm);
      int v = add_value(im, nm, &s);
      if (v < 0) return s;
      g->values[v].producer = (int)i;
      n->out[k] = v;
    }
  }

  for (size_t i = 0; i < gp->n_output; i++) {
    const Onnx__ValueInfoProto *vi = gp->output[i];
    const char *nm = vi->name ? vi->name : "";
    int v = map_get(&im->names, nm);
    if (v < 0) return kiln_fail(KILN_E_MODEL, "graph output '%s' is not produced by any node or input", nm);
    if (g->values[v].is_output) return kiln_fail(KILN_E_MODEL, "graph output '%s' is listed twice", nm);
    kiln_type ty = {0};
    if ((s = type_from_proto(vi->type, &ty, nm))) {
      for (int d = 0; d < KILN_MAX_RANK; d++) kiln_free(ty.dims[d].param);
      return s;
    }
    if (g->values[v].type.kind == KILN_TYPE_UNKNOWN || !g->values[v].is_input) {
      for (int d = 0; d < KILN_MAX_RANK; d++) kiln_free(g->values[v].type.dims[d].param);
      g->values[v].type = ty;
    } else {
      for (int d = 0; d < KILN_MAX_RANK; d++) kiln_free(ty.dims[d].param);
    }
    g->values[v].is_output = true;
    g->outputs[g->n_outputs++] = v;
  }
  for (size_t i = 0; i < gp->n_value_info; i++) {
    const Onnx__ValueInfoProto *vi = gp->value_info[i];
    int v = vi->name ? map_get(&im->names, vi->name) : -1;
    if (v < 0 || g->values[v].type.kind != KILN_TYPE_UNKNOWN) continue;
    if ((s = type_from_proto(vi->type, &g->values[v].type, vi->name))) return s;
  }
  return KILN_OK;
}

/* ---- nesting depth on the wire ---- */

/* The messages of onnx.proto that can nest (directly or through others),
 * and the fields that lead from one to another. */
typedef enum wire_msg {
  W_NONE, W_MODEL, W_GRAPH, W_NODE, W_ATTR, W_VALUE_INFO, W_TYPE, W_TYPE_ELEM, W_TYPE_MAP, W_FUNCTION, W_TRAINING
} wire_msg;

static wire_msg wire_child(wire_msg m, uint64_t field) {
  switch (m) {
  case W_MODEL: return field == 7 ? W_GRAPH : field == 25 ? W_FUNCTION : field == 20 ? W_TRAINING : W_NONE;
  case W_GRAPH: return field == 1 ? W_NODE : (field >= 11 && field <= 13) ? W_VALUE_INFO : W_NONE;
  case W_NODE: return field == 5 ? W_ATTR : W_NONE;
  case W_ATTR: return field == 6 || field == 11 ? W_GRAPH : field == 14 || field == 15 ? W_TYPE : W_NONE;
  case W_VALUE_INFO: return field == 2 ? W_TYPE : W_NONE;
  case W_TYPE: /* sequence_type, optional_type (elem_type = 1), map_type (value_type = 2) */
    return field == 4 || field == 9 ? W_TYPE_ELEM : field == 5 ? W_TYPE_MAP : W_NONE;
  case W_TYPE_ELEM: return field == 1 ? W_TYPE : W_NONE;
  case W_TYPE_MAP: return field == 2 ? W_TYPE : W_NONE;
  case W_FUNCTION: return field == 7 ? W_NODE : W_NONE;
  case W_TRAINING: return field == 1 || field == 2 ? W_GRAPH : W_NONE;
  case W_NONE: break;
  }
  return W_NONE;
}

static bool wire_varint(const uint8_t *p, size_t n, size_t *i, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *i < n; shift += 7) {
    uint8_t b = p[(*i)++];
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

/* Depth of message m (1) plus its deepest nested message, up to limit + 1. */
static int wire_depth(const uint8_t *p, size_t n, wire_msg m, int depth, int limit) {
  int deepest = depth;
  if (depth > limit) return depth;
  size_t i = 0;
  while (i < n) {
    uint64_t key, v;
    if (!wire_varint(p, n, &i, &key)) break;
    switch (key & 7) {
    case 0:
      if (!wire_varint(p, n, &i, &v)) return deepest;
      break;
    case 1: i = n - i < 8 ? n : i + 8; break;
    case 5: i = n - i < 4 ? n : i + 4; break;
    case 2: {
      if (!wire_varint(p, n, &i, &v) || v > n - i) return deepest;
      wire_msg c = wire_child(m, key >> 3);
      if (c != W_NONE) {
        int d = wire_depth(p + i, (size_t)v, c, depth + 1, limit);
        if (d > deepest) deepest = d;
        if (deepest > limit) return deepest;
      }
      i += (size_t)v;
      break;
    }
    default: return deepest; /* groups or garbage: protobuf-c decides */
    }
  }
  return deepest;
}

int kiln_onnx_nesting(const void *bytes, size_t size, int limit) {
  return size ? wire_depth(bytes, size, W_MODEL, 1, limit) : 0;
}

kiln_status kiln_onnx_import(const void *bytes, size_t size, kiln_graph **out) {
  *out = NULL;
  int depth = kiln_onnx_nesting(bytes, size, KILN_MAX_PROTO_DEPTH);
  if (depth > KILN_MAX_PROTO_DEPTH)
    return kiln_fail(KILN_E_PROTOBUF,
                     "the model's messages (subgraphs, nested types) nest deeper than %d levels, kiln's limit",
                     KILN_MAX_PROTO_DEPTH);
  pb_alloc_failed = 0;
  Onnx__ModelProto *mp = onnx__model_proto__unpack(&pb_allocator, size, bytes);
  if (!mp && pb_alloc_failed) return kiln_fail(KILN_E_NOMEM, "out of memory parsing the model (%zu bytes)", size);
  if (!mp) return kiln_fail(KILN_E_PROTOBUF, "the %zu bytes do not parse as an ONNX ModelProto", size);
  kiln_status s = KILN_OK;
  importer im = {0};
  kiln_graph *g = kiln_calloc(1, sizeof *g);
  if (!g) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory");
    goto done;
  }
  im.g = g;
  if (!mp->has_ir_version || mp->ir_version < 1) {
    s = kiln_fail(KILN_E_MODEL, "the model has no ir_version");
    goto done;
  }
  g->ir_version = mp->ir_version;
  if (!mp->graph) {
    s = kiln_fail(KILN_E_MODEL, "the model has no graph");
    goto done;
  }
  if (mp->n_functions) {
    s = kiln_fail(KILN_E_UNSUPPORTED_OP, "model-local functions are not supported");
    goto done;
  }
  g->opsets = kiln_calloc(mp->n_opset_import + 1, sizeof *g->opsets);
  if (!g->opsets) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < mp->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *op = mp->opset_import[i];
    g->opsets[i].domain = kiln_strdup(op->domain ? op->domain : "");
    if (!g->opsets[i].domain) {
      s = kiln_fail(KILN_E_NOMEM, "out of memory");
      goto done;
    }
    g->opsets[i].version = op->has_version ? op->version : 1;
    g->n_opsets++;
  }
  if (!g->n_opsets && mp->ir_version >= 3) {
    s = kiln_fail(KILN_E_MODEL, "the model imports no opset (required since IR version 3)");
    goto done;
  }
  if (!g->n_opsets) { /* IR 1-2: opset 1 of the default domain */
    g->opsets[0].domain = kiln_strdup("");
    g->opsets[0].version = 1;
    if (!g->opsets[0].domain) {
      s = kiln_fail(KILN_E_NOMEM, "out of memory");
      goto done;
    }
    g->n_opsets = 1;
  }
  g->name = kiln_strdup(mp->graph->name ? mp->graph->name : "");
  if (mp->n_metadata_props) {
    g->prop_keys = kiln_calloc(mp->n_metadata_props, sizeof(char *));
    g->prop_vals = kiln_calloc(mp->n_metadata_props, sizeof(char *));
    if (!g->prop_keys || !g->prop_vals) {
      s = kiln_fail(KILN_E_NOMEM, "out of memory");
      goto done;
    }
    for (size_t i = 0; i < mp->n_metadata_props; i++) {
      const Onnx__StringStringEntryProto *e = mp->metadata_props[i];
      g->prop_keys[i] = kiln_strdup(e->key ? e->key : "");
      g->prop_vals[i] = kiln_strdup(e->value ? e->value : "");
      g->n_props++;
      if (!g->prop_keys[i] || !g->prop_vals[i]) {
        s = kiln_fail(KILN_E_NOMEM, "out of memory");
        goto done;
      }
    }
  }
  if (!g->name) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory");
    goto done;
  }
  s = import_graph(&im, mp);
done:
  map_free(&im.names);
  onnx__model_proto__free_unpacked(mp, &pb_allocator);
  if (s) kiln_graph_free(g);
  else *out = g;
  return s;
}
