/* ir/dump: the KILN_DUMP=dir debug facility — Graphviz DOT of a graph (with
 * inferred shapes and view aliases when known) and opening the files that
 * the stages write into the dump directory. Dumping never fails a graph. */
#ifndef KILN_IR_DUMP_H
#define KILN_IR_DUMP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "ir/graph.h"
#include "ir/shape.h"
#include "ir/status.h"

/* Longest stem kiln_dump_stem makes (bytes, without the NUL). */
#define KILN_DUMP_STEM_MAX 128

/* Writes g as a Graphviz digraph to f. Nodes are boxes labelled
 * "name\nOpType" (domain::OpType outside the default domain); every value is
 * a small ellipse labelled "name\ndtype [dims]" between its producer and its
 * readers: inferred dtype and dims (symbolic ones as kiln_dimx_str prints
 * them) when sh is given, the declared type otherwise ("?" for what is not
 * known). Graph inputs are green, graph outputs orange with a double border,
 * constants (initializers) grey notes showing type and shape only (at most
 * 4 elements of data). A value v with alias_of[v] >= 0 (a view) has a
 * dashed border and a dashed edge "alias of" to alias_of[v]. sh and
 * alias_of (g->n_values entries, -1 for none) may be NULL; title (may be
 * NULL) labels the graph. Names are escaped (quotes, backslashes, control
 * bytes, invalid UTF-8). Fails with KILN_E_INTERNAL on a NULL g or f, or
 * when writing to f failed (the message says so). */
kiln_status kiln_dump_dot(const kiln_graph *g, const kiln_shapes *sh, const int *alias_of, const char *title,
                          FILE *f);

/* True when KILN_DUMP names a directory to dump into (set, not empty). */
bool kiln_dump_enabled(void);

/* A file-name stem for a graph called name (NULL or "" means "graph"):
 * name with every byte outside [A-Za-z0-9_.-] replaced by '_', cut to
 * KILN_DUMP_STEM_MAX - 8 bytes; the first graph of the process to get a
 * stem gets it as it is, a later one that would collide gets "<stem>-2",
 * "<stem>-3", ... (a process-wide registry under a lock, so threads
 * preparing graphs of the same name never share files). Written into buf
 * (size >= 16; KILN_DUMP_STEM_MAX + 1 holds any stem); returns buf. Call it
 * only when dumping (the registry keeps 12 bytes per stem for the process's
 * life). Never fails (out of memory, the stem returned is unique among
 * those handed out so far but is not registered). */
const char *kiln_dump_stem(const char *name, char *buf, size_t size);

/* Opens "<KILN_DUMP>/<stem>.<ext>" for writing (stem and ext sanitised to
 * [A-Za-z0-9_.-], ext NULL or "" for none), creating the directory and its
 * parents if needed. *f is NULL and KILN_OK is returned when KILN_DUMP is
 * unset or empty, and also when the file cannot be made (an unwritable or
 * bad directory): that is logged once per process at KILN_LOG_WARN and
 * never fails the caller. KILN_E_INTERNAL only for a NULL stem or f. The
 * caller closes *f with fclose. */
kiln_status kiln_dump_open(const char *stem, const char *ext, FILE **f);

/* Convenience for the stages: when dumping, writes kiln_dump_dot(g, sh,
 * alias_of, title) to "<stem>.<what>.dot". Problems are logged (once, at
 * KILN_LOG_WARN) and the thread's last-error message is left as it was. */
void kiln_dump_graph(const char *stem, const char *what, const kiln_graph *g, const kiln_shapes *sh,
                     const int *alias_of, const char *title);

/* Closes a dump file opened by kiln_dump_open (NULL is fine), logging a
 * write or close error (once, at KILN_LOG_WARN) for the file stem.ext.
 * Returns true when everything was written. */
bool kiln_dump_close(FILE *f, const char *stem, const char *ext);

#endif
