/* plugin/fault_int.h: what the fault build's wrappers share (plugin/fault.c
 * holds the state). */
#ifndef KILN_PLUGIN_FAULT_INT_H
#define KILN_PLUGIN_FAULT_INT_H
#include <stdbool.h>

/* Counts a call of kind (when armed); true when this one must fail.
 * what names the function (a string literal). */
bool kiln_fault_hit(int kind, const char *what);
/* Adds delta to the live count of what (KILN_FAULT_LIVE_*). */
void kiln_fault_live(int what, long delta);

#endif
