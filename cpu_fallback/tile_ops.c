/* cpu_fallback/tile_ops: the scalar twin of the tile ops (portable C; the
 * AVX2/FMA version is tile_avx2.c) and the list of ops they implement. */
#define TILE_SUFFIX base
#define TILE_VM(f) kiln_vm_##f##_base
#include "cpu_fallback/tile_ops.inc"

bool kiln_tile_op_known(int op) {
  switch ((kiln_fuse_op)op) {
  case KILN_FUSE_LOAD:
  case KILN_FUSE_CONST:
  case KILN_FUSE_ANCHOR:
  case KILN_FUSE_REDUCE:
  case KILN_FUSE_SHL:
  case KILN_FUSE_SHR:
  case KILN_FUSE_OP_COUNT: return false;
  default: return op >= 0 && op < KILN_FUSE_OP_COUNT;
  }
}

void kiln_tile_eval_base(const kiln_tile_op *op, int n, const float *a, const float *b, const float *c, float *y) {
  generic_base(op, n, a, b, c, y);
}

void kiln_tile_store_base(float *dst, const float *src, int n, bool stream) {
  (void)stream;
  if (dst != src) memcpy(dst, src, sizeof *dst * (size_t)n);
}
