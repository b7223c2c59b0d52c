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

bool kiln_tile_seq_op(int op) {
  switch ((kiln_fuse_op)op) {
  case KILN_FUSE_ADD:
  case KILN_FUSE_SUB:
  case KILN_FUSE_MUL:
  case KILN_FUSE_DIV:
  case KILN_FUSE_MIN:
  case KILN_FUSE_MAX:
  case KILN_FUSE_RELU:
  case KILN_FUSE_CLIP:
  case KILN_FUSE_SIGMOID:
  case KILN_FUSE_TANH:
  case KILN_FUSE_EXP:
  case KILN_FUSE_ERF: return true;
  default: return false;
  }
}

/* The strip of 64 elements goes through every step in a scratch strip
 * before it is written to y, as in kiln_tile_seq_avx512. */
void kiln_tile_seq_base(const kiln_tile_seq *q, int n, float *y) {
  enum { STRIP = 64 };
  float v[STRIP];
  for (int i = 0; i < n; i += STRIP) {
    int m = n - i < STRIP ? n - i : STRIP;
    memcpy(v, q->x + i, sizeof *v * (size_t)m);
    for (int k = 0; k < q->n; k++) {
      const kiln_tile_seq_step *s = &q->s[k];
      const float *a[3] = {NULL, NULL, NULL};
      float u[3][STRIP];
      for (int j = 0; j < s->n_args; j++) {
        if (j == s->pos) {
          a[j] = v;
        } else if (s->uniform[j]) {
          for (int e = 0; e < m; e++) u[j][e] = s->a[j][0];
          a[j] = u[j];
        } else {
          a[j] = s->a[j] + i;
        }
      }
      generic_base(&s->op, m, a[0], a[1], a[2], v);
    }
    memcpy(y + i, v, sizeof *v * (size_t)m);
  }
}
