/* ir/graph_edit: mutation helpers for kiln_graph (prefix kiln_edit_) — deep
 * copy, adding values, constants and nodes, removing nodes, rewiring uses,
 * and a checker for the invariants every rewrite must keep (SSA names,
 * topological order, consistent producer / input / output bookkeeping). */
#ifndef KILN_IR_GRAPH_EDIT_H
#define KILN_IR_GRAPH_EDIT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/graph.h"

/* A new, empty graph importing opset `opset` of the default domain (IR
 * version 8). For building graphs in code (tests, synthetic models). */
kiln_status kiln_edit_new_graph(int64_t opset, kiln_graph **out);

/* Deep copy: every name, type, attribute and constant tensor is copied, so
 * the two graphs share nothing. On failure *out is NULL. */
kiln_status kiln_edit_clone(const kiln_graph *g, kiln_graph **out);
/* kiln_edit_clone, except that the dense constant tensors (initializers,
 * tensor attributes) borrow g's data (owns false) instead of copying it:
 * the clone must be freed before g is, and g's tensors must not change
 * meanwhile. The clone's own edits (types, names, a new initializer) are
 * its own; a borrowed tensor's data must not be written. */
kiln_status kiln_edit_clone_shared(const kiln_graph *g, kiln_graph **out);

/* True when v holds constant data: an initializer that is not also a graph
 * input (a listed input's initializer is only a default the caller may
 * override). */
bool kiln_edit_is_const(const kiln_graph *g, int v);

/* True for the default ONNX domain ("" or "ai.onnx"). */
bool kiln_edit_default_domain(const char *domain);

/* A name not yet used by any value: base itself when free, else base_1,
 * base_2, ... Written into buf (truncated names are made unique too).
 * Linear in the number of values per try: meant for a handful of new
 * values per pass, not one per node of a large graph. */
void kiln_edit_unique_name(const kiln_graph *g, const char *base, char *buf, size_t size);

/* Appends a value with a unique name derived from base, no producer, no
 * data and unknown type; *out gets its index. Value indices stay valid,
 * but kiln_value pointers into g->values do not (the array may move). */
kiln_status kiln_edit_add_value(kiln_graph *g, const char *base, int *out);

/* Appends a constant value owning the tensor *t (moved: *t is reset to
 * empty on success, untouched on failure), typed from the tensor. The
 * tensor must own dense storage. */
kiln_status kiln_edit_add_const(kiln_graph *g, const char *base, kiln_tensor *t, int *out);

/* Appends a graph input of the given type (for building graphs); *out gets
 * the value index. */
kiln_status kiln_edit_add_input(kiln_graph *g, const char *name, kiln_dtype dtype, int rank, const int64_t *dims,
                                int *out);
/* Lists value v as the next graph output. Fails if it already is one. */
kiln_status kiln_edit_add_output(kiln_graph *g, int v);

/* Inserts a node at position pos (0..n_nodes) reading values in[] and
 * writing out[] (-1 for omitted optionals); its opset is the graph's
 * import for domain. Every output must be a value with no producer, no
 * data and not a graph input. Later nodes shift by one and producers are
 * renumbered. Keeping topological order is the caller's duty
 * (kiln_edit_check verifies it). *index (optional) gets the position. */
kiln_status kiln_edit_insert_node(kiln_graph *g, int pos, const char *name, const char *op_type,
                                  const char *domain, int n_in, const int *in, int n_out, const int *out,
                                  int *index);

/* Removes every node i with drop[i] set, keeping the order of the others,
 * and renumbers producers. Values written by removed nodes lose their
 * producer: the caller must have rewired their uses (or they are dead).
 * Returns the number of nodes removed. Allocates nothing, cannot fail. */
int kiln_edit_remove_nodes(kiln_graph *g, const bool *drop);
/* Removes the single node i (see kiln_edit_remove_nodes). */
void kiln_edit_remove_node(kiln_graph *g, int i);

/* Drops every value that is no graph input or output and that no node
 * reads or writes (orphans left by removals, unused initializers),
 * renumbering the rest in their order. *dropped (optional) gets the count. */
kiln_status kiln_edit_compact(kiln_graph *g, int *dropped);

/* Makes every node input that reads `from` read `to` instead; graph
 * outputs are not touched. Returns the number of inputs changed. */
int kiln_edit_replace_uses(kiln_graph *g, int from, int to);

/* uses[v] (n_values entries) = how many node input slots read value v. */
void kiln_edit_use_counts(const kiln_graph *g, int *uses);

/* Attribute setters: replace the attribute of that name (whatever its
 * type) or append one. set_tensor moves *t into the attribute like
 * kiln_edit_add_const. */
kiln_status kiln_edit_set_int(kiln_node *n, const char *name, int64_t v);
kiln_status kiln_edit_set_float(kiln_node *n, const char *name, float v);
kiln_status kiln_edit_set_ints(kiln_node *n, const char *name, const int64_t *v, size_t count);
kiln_status kiln_edit_set_floats(kiln_node *n, const char *name, const float *v, size_t count);
kiln_status kiln_edit_set_string(kiln_node *n, const char *name, const char *v);
kiln_status kiln_edit_set_tensor(kiln_node *n, const char *name, kiln_tensor *t);
/* Removes the attribute of that name if present; returns whether it was. */
bool kiln_edit_remove_attr(kiln_node *n, const char *name);

/* Deep copy of one attribute into *dst (which must be empty). */
kiln_status kiln_edit_copy_attr(kiln_attr *dst, const kiln_attr *src);
/* Frees what an attribute owns and resets it to empty. */
void kiln_edit_free_attr(kiln_attr *a);

/* Checks the graph's invariants: indices in range; unique, non-empty value
 * names; each value written by at most one node, and values[v].producer
 * naming exactly that node; no node writes a graph input or a constant;
 * every node input is a graph input, an initializer or the output of an
 * earlier node; graph inputs / outputs listed once each and matching the
 * is_input / is_output flags; every graph output defined. KILN_OK, or
 * KILN_E_INTERNAL with a message naming the first broken rule. */
kiln_status kiln_edit_check(const kiln_graph *g);

#endif
