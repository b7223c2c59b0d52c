/* fuse/fuse_impl: private to fuse/ — the layout of the fusion context, the
 * per-group state that the predicate reads and the grouping pass advances,
 * and what fusion needs to know of single nodes (fuse/opinfo.c). */
#ifndef KILN_FUSE_IMPL_H
#define KILN_FUSE_IMPL_H
#include <stdbool.h>

#include "fuse/kinds.h"
#include "fuse/predicate.h"
#include "ir/views.h"

/* The role of a value inside the group that computes it. */
enum {
  KILN_FUSE_ROLE_MEM = 0, /* not computed in the group: read from memory */
  KILN_FUSE_ROLE_LEAF,    /* a view (chain of index maps) of a value from memory */
  KILN_FUSE_ROLE_FULL,    /* computed over the group's iteration domain (row-major order) */
  KILN_FUSE_ROLE_REDUCED, /* computed over the reduced domain (reduced axes of extent 1) */
  KILN_FUSE_ROLE_POOLED,  /* the output of the group's pooling */
  KILN_FUSE_ROLE_OPAQUE   /* an output of an opaque group's node */
};

/* What a group has, as the predicate sees it. */
typedef struct kiln_fuse_gstate {
  int n_nodes;
  int anchor, pool, opaque; /* node indices, -1 when none */
  int n_red;                /* reductions of the spec (Softmax counts 2) */
  bool has_domain;          /* set by the first node that computes */
  int rank;
  kiln_dimx dims[KILN_MAX_RANK];
  kiln_dimx numel;
  bool red[KILN_MAX_RANK]; /* reduced axes of the domain, when n_red > 0 */
  kiln_dimx rnumel;        /* elements of the reduced domain */
  int n_reads;             /* distinct memory values loaded */
  int reads[KILN_FUSE_MAX_INPUTS];
} kiln_fuse_gstate;

struct kiln_fuse_ctx {
  const kiln_graph *g;
  const kiln_shapes *sh;
  kiln_fuse_opts opts;
  const kiln_fuse_kind_def **def; /* per node; NULL: unknown (opaque) */
  int *cons_off, *cons;           /* distinct readers of v: cons[cons_off[v] .. cons_off[v + 1]) */
  int *group_of;                  /* per node, -1 */
  unsigned char *role;            /* per value: its role in its producer's group */
  int *leaf_base;                 /* per value of role LEAF: the memory value it views */
  int n_groups, cap_groups, open;
  kiln_fuse_gstate *groups;
  int64_t *vals; /* symbol values for concrete maps (kiln_fuse_ctx_bind), or NULL */
  int n_vals;
};

/* --- fuse/opinfo.c --- */

/* True when input k of node n is data the op reads element by element (a
 * kernel loads it); false for shape, axes and type-only inputs. */
bool kiln_fuse_data_input(const kiln_node *n, int k);
/* The reduced axes (red[0..rank) of the reduction's data input) of a
 * reduction node, and how many spec reductions it makes; false (message in
 * why) when they are not known at compile time. */
bool kiln_fuse_red_axes(const kiln_graph *g, const kiln_shapes *sh, const kiln_node *n, bool *red, int *n_red,
                        char *why, size_t size);
/* True when view node n's parameters are known at compile time (constant
 * or symbolic), so that it is an index map; else false with why. */
bool kiln_fuse_view_known(const kiln_graph *g, const kiln_shapes *sh, const kiln_node *n, char *why, size_t size);
/* The concrete movement op of output k of view node n, at the symbol
 * values vals (NULL: recorded values only); *pad gets Pad's constant (0
 * otherwise). Fails (with a message) when a dim or parameter is unknown. */
kiln_status kiln_fuse_view_op(const kiln_graph *g, const kiln_shapes *sh, const int64_t *vals, int n_vals,
                              const kiln_node *n, int k, kiln_view_op *op, double *pad);
/* Shape comparisons over symbolic dims: equal handles, or equal after
 * substituting the values the model fixes. */
bool kiln_fuse_dim_eq(kiln_symtab *tab, kiln_dimx a, kiln_dimx b);
bool kiln_fuse_dim_is(kiln_symtab *tab, kiln_dimx a, int64_t v);
bool kiln_fuse_shape_eq(kiln_symtab *tab, int ra, const kiln_dimx *a, int rb, const kiln_dimx *b);
/* The product of dims as an expression; false when it cannot be formed. */
bool kiln_fuse_numel(kiln_symtab *tab, int rank, const kiln_dimx *dims, kiln_dimx *out);
/* "[2,N,3]" into buf. */
const char *kiln_fuse_dims_str(kiln_symtab *tab, int rank, const kiln_dimx *dims, char *buf, size_t size);
/* "Relu 'name'" (or "Relu #i") into buf. */
const char *kiln_fuse_node_str(const kiln_graph *g, int node, char *buf, size_t size);

/* --- fuse/predicate.c: the join check shared with the grouping pass --- */

/* Outputs of a node checked for joining, with the roles they would get. */
#define KILN_FUSE_MAX_OUTS 64
typedef struct kiln_fuse_outroles {
  int n;
  int value[KILN_FUSE_MAX_OUTS];
  unsigned char role[KILN_FUSE_MAX_OUTS];
  int base[KILN_FUSE_MAX_OUTS];
} kiln_fuse_outroles;

#endif
