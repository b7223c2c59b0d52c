/* tests/opencl_cache: the kiln cache (KILN_CACHE_DIR) through the OpenCL
 * engine on the first device the ICD selection offers: a cold plan stores
 * the rewritten graph at init and the device binary after its first run
 * (KILN_CL_BINARY_CACHE=1), a new plan of the same graph loads both (counted
 * hits); a damaged entry (a flipped payload byte, a truncated file, of
 * either kind) is detected, warned about once, and rebuilt, with correct
 * results each time; an unusable directory and a read-only one still run;
 * KILN_CACHE_DIR=off stores nothing. Results are compared with the
 * reference interpreter. The graph record's reader is also fed damaged
 * bytes directly. Exits 77 without a device. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graphbuild.h"
#include "ir/alloc.h"
#include "opencl/cache.h"
#include "opencl/engine.h"
#include "opencl/graph_cache.h"
#include "opencl/import_cache.h"
#include "reference/exec.h"
#include "testutil.h"

static int passed, failed;
#include "tests/check.h"

/* y = sigmoid(relu(x * scale + bias)) - x, one fused kernel. */
static kiln_graph *graph(void) {
  kiln_graph *g = new_graph(17);
  const int64_t dx[] = {64, 256}, db = 256;
  input(g, "x", KILN_F32, 2, dx);
  int bad = gb_f32_ramp(g, "bias", 1, &db, -0.5, 0.01) < 0 || gb_f32_ramp(g, "scale", 0, NULL, 1.5, 0) < 0;
  bad = bad || gb_add(g, "Mul", "x scale", "a") < 0;
  bad = bad || gb_add(g, "Add", "a bias", "b") < 0;
  bad = bad || gb_add(g, "Relu", "b", "c") < 0;
  bad = bad || gb_add(g, "Sigmoid", "c", "d") < 0;
  bad = bad || gb_add(g, "Sub", "d x", "y") < 0;
  if (bad) exit(2);
  output(g, "y");
  return g;
}

static kiln_graph *g;
static const kiln_cl_device *dev;
static kiln_tensor x, ref;
static char root[256], cdir[512];

/* Prepares a plan of g, runs it `runs` times and checks each result against
 * the reference; returns the cache statistics' change in *d. */
static kiln_cl_graph_cache_stats gd; /* the graph records' part of the last run_plan */
static int host_weights; /* the last run_plan's weights read in place (kiln_cl_plan_stats) */
static int programs, kernels; /* the last run_plan's programs and generated kernels */
static int preloaded, preload_used; /* the last run_plan's programs loaded ahead, and taken (opencl/preload.h) */
static int pre_kernels, pre_kernels_used; /* ... their kernels made ahead, and taken */
static int pre_skipped; /* ... listed programs asked for before a thread started on them */
static int pre_waited;  /* ... listed programs asked for while a thread loaded them */
static int pre_kernels_waited; /* ... kernels made ahead asked for while being made */

/* A part of its own over many programs: the kiln cache in root/name (its
 * path into dir when given), no programs kept for the process (each plan
 * loads its programs from the directory), a program per kernel and a kernel
 * per node; _leave undoes it (the kept programs stay off, as the part before
 * left them). */
static void programs_dir_enter(const char *name, char *dir, size_t n) {
  char d[600];
  snprintf(d, sizeof d, "%s/%s", root, name);
  if (dir) snprintf(dir, n, "%s", d);
  setenv("KILN_CACHE_DIR", d, 1);
  setenv("KILN_CL_PROGRAM_CACHE", "0", 1);
  setenv("KILN_CL_PROGRAM_SPLIT", "1", 1);
  setenv("KILN_FUSION", "0", 1);
}

static void programs_dir_leave(void) {
  unsetenv("KILN_CL_PROGRAM_SPLIT");
  unsetenv("KILN_FUSION");
  unsetenv("KILN_CL_PROGRAM_CACHE");
  setenv("KILN_CACHE_DIR", cdir, 1);
}

static void run_plan(const char *what, int runs, kiln_cl_cache_stats *d) {
  kiln_cl_cache_stats s0, s1;
  kiln_cl_graph_cache_stats g0, g1;
  kiln_cl_cache_stats_get(&s0);
  kiln_cl_graph_cache_stats_get(&g0);
  kiln_cl_plan *p = NULL;
  kiln_status s = kiln_cl_plan_prepare(dev, g, &p);
  CHECK(!s, "%s: prepare: %s", what, kiln_last_error());
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values + 1, sizeof *bound);
  bound[val(g, "x")] = &x;
  for (int r = 0; r < runs && !s; r++) {
    kiln_tensor out = {0};
    s = kiln_cl_plan_run(p, g, bound, &out);
    CHECK(!s, "%s: run %d: %s", what, r, kiln_last_error());
    char m[400];
    if (!s) CHECK(tu_compare(&out, &ref, 1e-5, 1e-6, m, sizeof m, NULL, NULL), "%s: run %d: %s", what, r, m);
    kiln_tensor_release(&out);
  }
  kiln_free(bound);
  kiln_cl_plan_stats pst;
  kiln_cl_plan_get_stats(p, &pst);
  host_weights = pst.host_weights;
  programs = pst.programs;
  kernels = pst.kernels;
  preloaded = pst.preloaded;
  preload_used = pst.preload_used;
  pre_kernels = pst.preload_kernels;
  pre_kernels_used = pst.preload_kernels_used;
  pre_skipped = pst.preload_skipped;
  pre_waited = pst.preload_waited;
  pre_kernels_waited = pst.preload_kernels_waited;
  kiln_cl_plan_release(p);
  kiln_cl_cache_stats_get(&s1);
  kiln_cl_graph_cache_stats_get(&g1);
  gd.hits = g1.hits - g0.hits;
  gd.stores = g1.stores - g0.stores;
  d->hits = s1.hits - s0.hits;
  d->misses = s1.misses - s0.misses;
  d->corrupt = s1.corrupt - s0.corrupt;
  d->writes = s1.writes - s0.writes;
  d->write_failures = s1.write_failures - s0.write_failures;
  d->warnings = s1.warnings - s0.warnings;
  printf("  %-40s hits %llu (graph %lu), misses %llu, corrupt %llu, writes %llu (graph %lu), write failures %llu, "
         "warnings %llu\n",
         what, (unsigned long long)d->hits, gd.hits, (unsigned long long)d->misses, (unsigned long long)d->corrupt,
         (unsigned long long)d->writes, gd.stores, (unsigned long long)d->write_failures,
         (unsigned long long)d->warnings);
}

/* The path of an entry (*.kc) in dir other than `not`; the count of entries. */
static int entry(const char *dir, const char *not, char *path, size_t n) {
  DIR *d = opendir(dir);
  int k = 0;
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l > 3 && !strcmp(e->d_name + l - 3, ".kc")) {
      char p[1024];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      if (strcmp(p, not)) snprintf(path, n, "%s", p);
      k++;
    }
  }
  closedir(d);
  return k;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) ? -1 : (long)st.st_size;
}

static void flip_byte(const char *path, long at) {
  FILE *f = fopen(path, "r+b");
  if (!f) return;
  fseek(f, at, SEEK_SET);
  int c = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(c ^ 0x5a, f);
  fclose(f);
}

/* The import record (opencl/import_cache) of g: the round trip keeps the
 * graph (its rewritten-graph key is the one carried, so a warm init may
 * skip computing it) and reads the tensors in place; cut or damaged heads
 * and cut bodies are refused. */
static void test_import_records(void) {
  kiln_cl_key gk, k1, k2;
  CHECK(kiln_cl_rewrite_key(g, false, &gk), "import record: the rewritten-graph key");
  void *rec = NULL;
  size_t rlen = 0;
  CHECK(kiln_cl_import_pack(g, &gk, &rec, &rlen), "import record: pack");
  kiln_graph *back = NULL;
  bool has = false;
  CHECK(rec && !kiln_cl_import_unpack(rec, rlen, &back, &k1, &has) && back && has && k1.hi == gk.hi && k1.lo == gk.lo,
        "import record: round trip with the key: %s", kiln_last_error());
  CHECK(back && kiln_cl_rewrite_key(back, false, &k2) && k2.hi == gk.hi && k2.lo == gk.lo,
        "import record: the graph read back has the carried key");
  int in_place = 0, stored = 0;
  for (int v = 0; back && v < back->n_values; v++) {
    const kiln_tensor *bt = back->values[v].init;
    if (!bt || !bt->numel) continue;
    stored++;
    const unsigned char *d = bt->data, *r0 = rec;
    in_place += !bt->owns && d >= r0 && d + kiln_tensor_bytes(bt) <= r0 + rlen && (uintptr_t)d % 16 == 0;
  }
  CHECK(stored > 0 && in_place == stored, "import record: weights read in place, 16-byte aligned (%d of %d)",
        in_place, stored);
  kiln_graph_free(back);
  void *rec0 = NULL;
  size_t rlen0 = 0;
  back = NULL;
  CHECK(kiln_cl_import_pack(g, NULL, &rec0, &rlen0) && !kiln_cl_import_unpack(rec0, rlen0, &back, &k1, &has) && !has,
        "import record without a key: read, no key");
  kiln_graph_free(back);
  kiln_free(rec0);
  int refused = 0, tried = 0;
  for (size_t cut = 0; rec && cut < rlen; cut += 1 + cut / 8, tried++) {
    back = NULL;
    if (kiln_cl_import_unpack(rec, cut, &back, &k1, &has)) refused++;
    kiln_graph_free(back);
  }
  CHECK(refused == tried, "import record: every cut refused (%d of %d)", refused, tried);
  unsigned char *dmg = kiln_malloc(rlen);
  int head_refused = 0;
  for (size_t at = 0; rec && dmg && at < 64; at++) {
    if (at >= 16 && at < 32) continue; /* the key itself: any value reads */
    memcpy(dmg, rec, rlen);
    dmg[at] ^= 0x20;
    back = NULL;
    if (kiln_cl_import_unpack(dmg, rlen, &back, &k1, &has)) head_refused++;
    kiln_graph_free(back);
  }
  CHECK(head_refused == 48, "import record: each damaged head byte refused (%d of 48)", head_refused);
  kiln_free(dmg);
  kiln_free(rec);
  kiln_error_clear();
}

/* The record reader on damaged bytes that pass the checksum (a format
 * bug's view): every cut and many flips are refused or read, never a crash
 * or a leak (`--records`: this part alone, no device; under ASan in ctest). */
static void test_records(void) {
  kiln_cl_key k1, k2;
  /* a copy of g with attributes of every kind the record holds (never run) */
  kiln_graph *keep = g;
  if (kiln_edit_clone(keep, &g)) exit(2);
  const int64_t iv[] = {3, -1, 7};
  const float fv[] = {0.5f, -2.0f};
  kiln_tensor at = {0};
  const int64_t ad[] = {2, 3};
  if (kiln_tensor_alloc(&at, KILN_I64, 2, ad)) exit(2);
  for (int64_t i = 0; i < at.numel; i++) ((int64_t *)at.data)[i] = i * 11;
  kiln_node *n0 = &g->nodes[0];
  if (kiln_edit_set_int(n0, "an_int", -5) || kiln_edit_set_float(n0, "a_float", 0.25f) ||
      kiln_edit_set_ints(n0, "ints", iv, 3) || kiln_edit_set_floats(n0, "floats", fv, 2) ||
      kiln_edit_set_string(n0, "str", "text") || kiln_edit_set_tensor(n0, "t", &at))
    exit(2);
  kiln_tensor_release(&at);
  void *rec = NULL;
  size_t rlen = 0;
  kiln_rewrite_stats rst;
  memset(&rst, 0, sizeof rst);
  CHECK(kiln_cl_graph_pack(g, NULL, &rst, NULL, &rec, &rlen), "pack");
  kiln_graph *back = NULL;
  kiln_rewrite_stats rst2;
  signed char *facts = (signed char *)1;
  CHECK(rec && !kiln_cl_graph_unpack(rec, rlen, NULL, &back, &rst2, &facts) && back && back->n_nodes == g->n_nodes &&
            back->n_values == g->n_values && !facts,
        "round trip (no facts): %s", kiln_last_error());
  CHECK(back && kiln_cl_graph_key(back, "t", &k1) && kiln_cl_graph_key(g, "t", &k2) && k1.hi == k2.hi &&
            k1.lo == k2.lo,
        "the round trip keeps every field (same key)");
  int in_place = 0, stored = 0;
  for (int v = 0; back && v < back->n_values; v++) {
    const kiln_tensor *bt = back->values[v].init;
    if (!bt || !bt->numel) continue;
    stored++;
    const unsigned char *d = bt->data, *r0 = rec;
    in_place += !bt->owns && d >= r0 && d + kiln_tensor_bytes(bt) <= r0 + rlen &&
                (uintptr_t)d % kiln_dtype_size(bt->dtype) == 0;
  }
  CHECK(stored > 0 && in_place == stored, "stored tensors are read in place, aligned (%d of %d)", in_place, stored);
  kiln_graph_free(back);
  void *rec2 = NULL; /* against a base: every initializer a reference */
  size_t rlen2 = 0;
  back = NULL;
  /* with facts: one byte a value, each of the three kinds */
  signed char *want = kiln_calloc((size_t)g->n_values + 1, 1);
  for (int v = 0; want && v < g->n_values; v++) want[v] = (signed char)(v % 3 - 1);
  CHECK(want && kiln_cl_graph_pack(g, g, &rst, want, &rec2, &rlen2) && rlen2 + 1000 < rlen,
        "references are smaller (%zu < %zu)", rlen2, rlen);
  CHECK(rec2 && !kiln_cl_graph_unpack(rec2, rlen2, g, &back, &rst2, &facts) && back &&
            kiln_cl_graph_key(back, "t", &k1) && k1.hi == k2.hi && k1.lo == k2.lo,
        "references round trip: %s", kiln_last_error());
  CHECK(facts && want && !memcmp(facts, want, (size_t)g->n_values), "the facts round trip");
  kiln_free(facts);
  facts = NULL;
  if (rec2 && rlen2 > 8) { /* the facts are the record's last bytes: a value other than -1, 0, 1 is refused */
    kiln_graph *bad = NULL;
    unsigned char *r2 = rec2;
    unsigned char last = r2[rlen2 - 1];
    r2[rlen2 - 1] = 2;
    CHECK(kiln_cl_graph_unpack(rec2, rlen2, g, &bad, &rst2, &facts) && !bad && !facts &&
              strstr(kiln_last_error(), "bad fact"),
          "a bad fact is refused (%s)", kiln_last_error());
    kiln_error_clear();
    r2[rlen2 - 1] = last;
    CHECK(kiln_cl_graph_unpack(rec2, rlen2 - 1, g, &bad, &rst2, &facts) && !bad && !facts,
          "a record one fact short is refused (%s)", kiln_last_error());
    kiln_error_clear();
  }
  kiln_free(want);
  int borrowed = 0, inits = 0;
  for (int v = 0; back && v < back->n_values && v < g->n_values; v++) {
    const kiln_tensor *bt = back->values[v].init, *gt = g->values[v].init;
    if (!gt || !gt->numel) continue;
    inits++;
    borrowed += bt && bt != gt && bt->data == gt->data && !bt->owns;
  }
  CHECK(inits > 0 && borrowed == inits, "references borrow the base's data (%d of %d initializers)", borrowed, inits);
  kiln_graph_free(back);
  back = NULL;
  CHECK(rec2 && kiln_cl_graph_unpack(rec2, rlen2, NULL, &back, &rst2, NULL) && !back,
        "references without the base: refused");
  kiln_error_clear();
  kiln_free(rec2);
  int refused = 0;
  for (size_t cut = 0; rec && cut < rlen; cut += 1 + cut / 8) {
    back = NULL;
    if (kiln_cl_graph_unpack(rec, cut, NULL, &back, &rst2, NULL)) refused++;
    kiln_graph_free(back);
  }
  CHECK(refused > 0, "cut records are refused (%d)", refused);
  unsigned char *dmg = kiln_malloc(rlen + 1);
  for (size_t at = 0; rec && dmg && at < rlen; at += 7) {
    memcpy(dmg, rec, rlen);
    dmg[at] ^= 0xff;
    back = NULL;
    facts = NULL;
    if (!kiln_cl_graph_unpack(dmg, rlen, NULL, &back, &rst2, &facts)) kiln_graph_free(back);
    kiln_free(facts);
    kiln_error_clear();
  }
  kiln_free(dmg);
  kiln_free(rec);
  kiln_error_clear();
  test_import_records();
  kiln_graph_free(g);
  g = keep;
}

/* kiln_cl_digest64: kiln_cl_hash64 up to one 4 MiB chunk; above, the same
 * value on one thread and on two, every call; a flipped byte in any chunk
 * (the first, a middle one, the short last one) or a byte less changes it. */
static void test_digest(void) {
  const size_t chunk = (size_t)4 << 20, n = 3 * chunk + 12345;
  unsigned char *b = kiln_malloc(n);
  CHECK(b != NULL, "digest: a buffer");
  if (!b) return;
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 131 + (i >> 11));
  CHECK(kiln_cl_digest64(b, 1000) == kiln_cl_hash64(b, 1000) && kiln_cl_digest64(b, chunk) == kiln_cl_hash64(b, chunk),
        "digest: one chunk or less is kiln_cl_hash64");
  uint64_t d1 = kiln_cl_digest64_threads(b, n, 1), d2 = kiln_cl_digest64_threads(b, n, 2);
  CHECK(d1 == d2 && d1 == kiln_cl_digest64(b, n) && d2 == kiln_cl_digest64_threads(b, n, 2),
        "digest: the same on one and two threads, every call (%016llx %016llx)", (unsigned long long)d1,
        (unsigned long long)d2);
  CHECK(kiln_cl_digest64_threads(b, chunk + 1, 1) == kiln_cl_digest64_threads(b, chunk + 1, 2) &&
            kiln_cl_digest64(b, chunk + 1) != kiln_cl_hash64(b, chunk + 1),
        "digest: one byte over a chunk is chunked, the same on both thread counts");
  const size_t at[] = {0, chunk - 1, chunk, 2 * chunk + 77, n - 1};
  int changed = 0;
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
    b[at[i]] ^= 0x10;
    changed += kiln_cl_digest64_threads(b, n, 1) != d1 && kiln_cl_digest64_threads(b, n, 2) != d1;
    b[at[i]] ^= 0x10;
  }
  CHECK(changed == (int)(sizeof at / sizeof at[0]), "digest: a flipped byte in any chunk changes it (%d of %zu)",
        changed, sizeof at / sizeof at[0]);
  CHECK(kiln_cl_digest64(b, n - 1) != d1 && kiln_cl_digest64(b, n) == d1, "digest: a byte less changes it");
  kiln_free(b);
}

/* kiln_cl_hash64: the vectorised form (AVX2 where the CPU has it) equals
 * the scalar twin on every length from 0 to 700 at unaligned starts, and
 * the dispatched hash (AVX2 from 1 MiB) equals it around and above 1 MiB;
 * every single flipped bit of a 300-byte input changes both (cache.c's
 * argument), also of 304-byte inputs whose every word is its key, or its
 * key ^ 1 (the product term blind to it, or moving as much as the rotated
 * word); two 128-byte blocks swapped, two words swapped between lanes, a
 * word moved one block on and a zero byte appended all change it. */
static void test_hash(void) {
  enum { N = 700 + 8 };
  unsigned char b[N + 256];
  for (size_t i = 0; i < sizeof b; i++) b[i] = (unsigned char)(i * 37 + (i >> 3) + 11);
  if (!kiln_cl_hash64_has_vec()) printf("  hash: no AVX2 or AVX-512 here: the vectorised form is the scalar twin\n");
  int same = 0, tried = 0;
  for (size_t n = 0; n <= 700; n++)
    for (size_t off = 0; off < 8; off += 3) {
      tried++;
      same += kiln_cl_hash64_vec(b + off, n) == kiln_cl_hash64_base(b + off, n) &&
              kiln_cl_hash64(b + off, n) == kiln_cl_hash64_base(b + off, n);
    }
  CHECK(same == tried, "hash: vectorised == scalar twin (%d of %d lengths and offsets)", same, tried);
  /* each vector width on its own (the dispatch takes the widest) */
  for (int width = 256; width <= 512; width += 256) {
    if (!kiln_cl_hash64_has_width(width)) {
      printf("  hash: no %d-bit vector hash on this CPU: not checked\n", width);
      continue;
    }
    int wsame = 0, wtried = 0;
    for (size_t n = 0; n <= 700; n++)
      for (size_t off = 0; off < 8; off += 3) {
        wtried++;
        wsame += kiln_cl_hash64_width(width, b + off, n) == kiln_cl_hash64_base(b + off, n);
      }
    CHECK(wsame == wtried, "hash: the %d-bit form == scalar twin (%d of %d lengths and offsets)", width, wsame, wtried);
  }
  const size_t mib = (size_t)1 << 20, big[] = {mib - 1, mib, mib + 1, mib + 8, mib + 135, 3 * mib + 77};
  unsigned char *m = kiln_malloc(3 * mib + 128);
  CHECK(m != NULL, "hash: a buffer");
  if (m) {
    uint64_t r = 0x9e3779b97f4a7c15ULL; /* xorshift64: no period a lane sum could hide in */
    for (size_t i = 0; i < 3 * mib + 128; i++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      m[i] = (unsigned char)r;
    }
    int bsame = 0;
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
      uint64_t h = kiln_cl_hash64_base(m + (i & 1), big[i]);
      bsame += kiln_cl_hash64(m + (i & 1), big[i]) == h &&
               (!kiln_cl_hash64_has_width(256) || kiln_cl_hash64_width(256, m + (i & 1), big[i]) == h) &&
               (!kiln_cl_hash64_has_width(512) || kiln_cl_hash64_width(512, m + (i & 1), big[i]) == h);
    }
    CHECK(bsame == (int)(sizeof big / sizeof big[0]),
          "hash: dispatched%s%s == scalar twin around 1 MiB (%d of %zu)",
          kiln_cl_hash64_has_width(256) ? ", 256-bit" : "", kiln_cl_hash64_has_width(512) ? ", 512-bit" : "", bsame,
          sizeof big / sizeof big[0]);
    kiln_free(m);
  }
  const size_t n = 300;
  const uint64_t h0 = kiln_cl_hash64_vec(b, n), h0b = kiln_cl_hash64_base(b, n);
  int flips = 0;
  for (size_t i = 0; i < n * 8; i++) {
    b[i / 8] ^= (unsigned char)(1u << (i % 8));
    flips += kiln_cl_hash64_vec(b, n) != h0 && kiln_cl_hash64_base(b, n) != h0b;
    b[i / 8] ^= (unsigned char)(1u << (i % 8));
  }
  CHECK(flips == (int)(n * 8), "hash: every flipped bit changes it (%d of %zu)", flips, n * 8);
  /* every word its position's key ^ e: e = 0 (y = 0: the product is 0
     before and after any one flip, only the rotated y sees it) and e = 1
     (lo32(y) = 1: a high-half flip moves the product by as much as the
     rotated word, the case where rotating x instead of y cancelled) */
  for (uint64_t e = 0; e < 2; e++) {
    unsigned char kb[304];
    for (size_t w = 0; w < sizeof kb / 8; w++) {
      uint64_t k = kiln_cl_hash64_key(w) ^ e;
      memcpy(kb + 8 * w, &k, 8);
    }
    const uint64_t hk = kiln_cl_hash64_vec(kb, sizeof kb), hkb = kiln_cl_hash64_base(kb, sizeof kb);
    int kflips = 0;
    for (size_t i = 0; i < sizeof kb * 8; i++) {
      kb[i / 8] ^= (unsigned char)(1u << (i % 8));
      kflips += kiln_cl_hash64_vec(kb, sizeof kb) != hk && kiln_cl_hash64_base(kb, sizeof kb) != hkb;
      kb[i / 8] ^= (unsigned char)(1u << (i % 8));
    }
    CHECK(hk == hkb && kflips == (int)(sizeof kb * 8),
          "hash: words equal to their keys ^ %d: the twin agrees, every flipped bit changes it (%d of %zu)", (int)e,
          kflips, sizeof kb * 8);
  }
  unsigned char c[512];
  memcpy(c, b, sizeof c);
  const uint64_t hc = kiln_cl_hash64_vec(c, sizeof c);
  unsigned char t[128];
  memcpy(t, c, 128), memcpy(c, c + 256, 128), memcpy(c + 256, t, 128); /* blocks 0 and 2 swapped */
  bool blocks = kiln_cl_hash64_vec(c, sizeof c) != hc && kiln_cl_hash64_base(c, sizeof c) != hc;
  memcpy(c, b, sizeof c);
  memcpy(t, c + 8, 8), memcpy(c + 8, c + 16, 8), memcpy(c + 16, t, 8); /* lanes 1 and 2 of block 0 */
  bool lanes = kiln_cl_hash64_vec(c, sizeof c) != hc;
  memcpy(c, b, sizeof c);
  memcpy(t, c + 24, 8), memcpy(c + 24, c + 152, 8), memcpy(c + 152, t, 8); /* lane 3, blocks 0 and 1 */
  bool moved = kiln_cl_hash64_vec(c, sizeof c) != hc;
  memcpy(c, b, sizeof c);
  c[300] = 0;
  bool longer = kiln_cl_hash64(c, 301) != kiln_cl_hash64(c, 300);
  CHECK(blocks && lanes && moved && longer,
        "hash: blocks swapped %d, lanes swapped %d, a word moved a block on %d, a zero byte more %d", blocks, lanes,
        moved, longer);
}

/* kiln_cl_cache_map on its own: a stored entry is mapped, not copied (the
 * same bytes), and released; a flipped byte, a cut payload or a cut header
 * is a miss, counted as corrupt, and the file deleted. */
static void test_map(void) {
  char dir[600], path[1024];
  snprintf(dir, sizeof dir, "%s/map", root);
  setenv("KILN_CACHE_DIR", dir, 1);
  kiln_cl_key k;
  kiln_cl_key_init(&k);
  kiln_cl_key_str(&k, "tests/opencl_cache map");
  size_t n = ((size_t)9 << 20) + 3; /* three digest chunks, hashed on two threads */
  unsigned char *b = kiln_malloc(n);
  for (size_t i = 0; b && i < n; i++) b[i] = (unsigned char)(i * 131 + (i >> 9));
  CHECK(b && kiln_cl_cache_put(k, b, n) && kiln_cl_cache_path(k, path, sizeof path), "map: an entry stored");
  kiln_cl_cache_view v;
  CHECK(kiln_cl_cache_map(k, &v) && v.map && v.len == n && !memcmp(v.bytes, b, n) &&
            (unsigned char *)v.bytes == (unsigned char *)v.map + 48 && v.map_len == n + 48,
        "map: a hit, the payload mapped in place after the header");
  kiln_cl_cache_view_release(&v);
  CHECK(!v.bytes && !v.map && !v.len, "map: released and zeroed");
  kiln_cl_cache_view_release(&v); /* a zero view: nothing */
  struct {
    const char *what;
    long cut, flip;
  } dmg[] = {{"a flipped payload byte", -1, 48 + 5000}, {"a flipped byte in the last chunk", -1, 48 + (9L << 20) + 1},
             {"a cut payload", 48 + 7000, -1},
             {"a flipped header byte", -1, 20}, {"a cut header", 30, -1}};
  for (size_t i = 0; i < sizeof dmg / sizeof dmg[0]; i++) {
    kiln_cl_cache_stats s0, s1;
    CHECK(kiln_cl_cache_put(k, b, n), "map: stored again");
    if (dmg[i].cut >= 0) CHECK(truncate(path, dmg[i].cut) == 0, "cut the entry");
    else flip_byte(path, dmg[i].flip);
    kiln_cl_cache_stats_get(&s0);
    bool hit = kiln_cl_cache_map(k, &v);
    kiln_cl_cache_stats_get(&s1);
    CHECK(!hit && !v.bytes && s1.corrupt == s0.corrupt + 1 && file_size(path) < 0,
          "map, %s: a miss, counted as corrupt, the file deleted", dmg[i].what);
  }
  kiln_free(b);
  setenv("KILN_CACHE_DIR", cdir, 1);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && !strcmp(argv[1], "--records")) {
    g = graph();
    test_hash();
    test_digest();
    test_records();
    kiln_graph_free(g);
    printf("opencl_cache --records: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
  }
  const kiln_cl_device_list *l = kiln_cl_engine_devices();
  if (!l->n) {
    printf("skipped: no OpenCL device (%s)\n", l->notes ? l->notes : "");
    return 77;
  }
  dev = &l->devices[0];
  printf("device: %s (%s)\n", dev->name, dev->driver_version);
  snprintf(root, sizeof root, "/tmp/kiln-clcache-XXXXXX");
  if (!mkdtemp(root)) {
    printf("cannot make a temporary directory\n");
    return 2;
  }
  snprintf(cdir, sizeof cdir, "%s/cache", root);
  setenv("KILN_CACHE_DIR", cdir, 1);
  setenv("KILN_CL_BINARY_CACHE", "1", 1);
  setenv("KILN_CL_GRAPH_CACHE", "1", 1); /* this graph's rewrite is too quick to be stored by default */
  /* the counts below are of binaries and graph records: no program list
     (opencl/preload.h; its own part sets it on) */
  setenv("KILN_CL_PRELOAD", "0", 1);
  g = graph();
  const int64_t dx[] = {64, 256};
  if (kiln_tensor_alloc(&x, KILN_F32, 2, dx)) return 2;
  for (int64_t i = 0; i < x.numel; i++) ((float *)x.data)[i] = (float)((double)((i * 7919) % 2001) / 500.0 - 2.0);
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values + 1, sizeof *bound);
  bound[val(g, "x")] = &x;
  if (kiln_ref_run(g, bound, &ref)) {
    printf("reference run failed: %s\n", kiln_last_error());
    return 2;
  }
  kiln_free(bound);
  test_records();

  kiln_cl_cache_stats d;
  char path[1024], gpath[1024];
  kiln_cl_key gkey;
  CHECK(kiln_cl_rewrite_key(g, false, &gkey) && kiln_cl_cache_path(gkey, gpath, sizeof gpath),
        "the graph record's key and path");
  run_plan("cold (empty directory)", 2, &d);
  CHECK(d.hits == 0 && d.writes == 2 && gd.stores == 1,
        "cold: misses; the rewritten graph stored at init, the binary after the first run");
  CHECK(entry(cdir, gpath, path, sizeof path) == 2 && file_size(gpath) > 48, "two entries in %s", cdir);
  long size = file_size(path), gsize = file_size(gpath);
  printf("  binary entry %s: %ld bytes; graph record %ld bytes\n", path, size, gsize);
  run_plan("warm", 2, &d);
  CHECK(d.hits == 2 && gd.hits == 1 && d.writes == 0 && d.corrupt == 0,
        "warm: the rewritten graph and the binary from the cache, nothing stored");
  bool cpu = (dev->type & CL_DEVICE_TYPE_CPU) != 0;
  CHECK(cpu ? host_weights >= 1 : host_weights == 0, "warm: %d weights read in place on a %s device", host_weights,
        cpu ? "CPU" : "non-CPU");
  setenv("KILN_CL_HOST_WEIGHTS", "0", 1);
  run_plan("warm, KILN_CL_HOST_WEIGHTS=0", 2, &d);
  CHECK(host_weights == 0 && d.hits == 2, "KILN_CL_HOST_WEIGHTS=0: every weight copied (%d in place)", host_weights);
  unsetenv("KILN_CL_HOST_WEIGHTS");

  /* a flipped payload byte: detected (checksum), warned once, rebuilt */
  flip_byte(path, 48 + size / 2);
  run_plan("binary: payload byte flipped", 2, &d);
  CHECK(d.hits == 1 && gd.hits == 1 && d.corrupt == 1 && d.writes == 1,
        "flipped byte: corrupt, rebuilt and stored again");
  CHECK(d.warnings == 1, "the first damaged entry is a warning");
  CHECK(file_size(path) == size, "the entry is whole again (%ld bytes)", file_size(path));
  run_plan("warm after the rebuild", 1, &d);
  CHECK(d.hits == 2 && d.corrupt == 0, "the rebuilt entry is a hit");
  /* truncated: detected (length), rebuilt; no second warning */
  CHECK(truncate(path, 40) == 0, "truncate the entry");
  run_plan("binary: truncated to 40 bytes", 2, &d);
  CHECK(d.hits == 1 && d.corrupt == 1 && d.writes == 1 && d.warnings == 0,
        "truncated: corrupt, rebuilt, no second warning");
  CHECK(truncate(path, size - 7) == 0, "cut the payload");
  run_plan("binary: payload cut short", 2, &d);
  CHECK(d.hits == 1 && d.corrupt == 1 && d.writes == 1, "cut payload: corrupt, rebuilt");
  /* the graph record: damaged -> rewritten again and stored again */
  flip_byte(gpath, gsize - 100);
  run_plan("graph record: byte flipped", 1, &d);
  CHECK(gd.hits == 0 && gd.stores == 1 && d.corrupt == 1 && d.hits == 1, "graph record: corrupt, rewritten, stored");
  CHECK(truncate(gpath, gsize / 2) == 0, "cut the graph record");
  run_plan("graph record: cut in half", 1, &d);
  CHECK(gd.hits == 0 && gd.stores == 1 && d.corrupt == 1, "cut graph record: corrupt, rewritten, stored");
  run_plan("warm again", 1, &d);
  CHECK(d.hits == 2 && gd.hits == 1 && d.corrupt == 0 && d.writes == 0, "whole again");

  /* the context's kept programs (KILN_CL_PROGRAM_CACHE on, a fresh
     directory, the binary stored after a variant's second run): a variant
     built and run once, then one from the kept program run twice, stores the
     binary; a third finds it on disk and stores nothing */
  {
    char kdir[600];
    snprintf(kdir, sizeof kdir, "%s/kept", root);
    setenv("KILN_CACHE_DIR", kdir, 1);
    setenv("KILN_CL_PROGRAM_CACHE", "1", 1);
    unsetenv("KILN_CL_BINARY_CACHE");
    setenv("KILN_FUSION", "0", 1); /* a program this process has not built yet */
    run_plan("kept programs: built, one run", 1, &d);
    CHECK(d.writes == gd.stores, "kept programs: one run stores no binary");
    run_plan("kept programs: kept, two runs", 2, &d);
    CHECK(programs >= 1 && d.writes == gd.stores + (uint64_t)programs,
          "kept programs: a variant from the kept programs stores the binaries the first did not (%d programs)",
          programs);
    run_plan("kept programs: kept again, two runs", 2, &d);
    CHECK(d.writes == gd.stores, "kept programs: the binary is known to be on disk: not stored again");
    unsetenv("KILN_FUSION");
    unsetenv("KILN_CL_PROGRAM_CACHE");
    setenv("KILN_CL_BINARY_CACHE", "1", 1);
    setenv("KILN_CACHE_DIR", cdir, 1);
  }

  /* the source cut into programs (KILN_CL_PROGRAM_SPLIT=1: one per kernel;
     KILN_FUSION=0: a kernel per node): every program's binary stored after
     the first run, each loaded from the kiln cache by a new plan; results
     right; =0 one program. The programs built and loaded on two threads
     (KILN_CL_PARALLEL_LOAD=1, whatever the machine's load), then loaded on
     one (=0): the same programs from the cache, the same results. */
  {
    programs_dir_enter("split", NULL, 0);
    setenv("KILN_CL_PARALLEL_LOAD", "1", 1);
    run_plan("split: cold", 2, &d);
    int np = programs;
    CHECK(np >= 3 && np == kernels, "split: a program per kernel (%d programs, %d kernels)", np, kernels);
    CHECK(d.hits == 0 && d.writes == (uint64_t)np + gd.stores, "split: each program's binary stored (%llu writes)",
          (unsigned long long)d.writes);
    run_plan("split: warm", 2, &d);
    CHECK(programs == np && d.hits == (uint64_t)np + gd.hits && d.writes == 0 && d.corrupt == 0,
          "split: every program from the kiln cache (%llu hits)", (unsigned long long)d.hits);
    setenv("KILN_CL_PARALLEL_LOAD", "0", 1);
    run_plan("split: warm, one thread", 1, &d);
    CHECK(programs == np && d.hits == (uint64_t)np + gd.hits && d.writes == 0 && d.corrupt == 0,
          "split, one thread: every program from the kiln cache (%llu hits)", (unsigned long long)d.hits);
    unsetenv("KILN_CL_PARALLEL_LOAD");
    setenv("KILN_CL_PROGRAM_SPLIT", "0", 1);
    run_plan("split off", 1, &d);
    CHECK(programs == 1 && kernels == np, "KILN_CL_PROGRAM_SPLIT=0: one program (%d)", programs);
    programs_dir_leave();
  }

  /* programs loaded ahead (opencl/preload.h), a program per kernel
     (several): a cold init loads none ahead and stores its list; a warm one
     loads every program ahead and takes each (KILN_CL_PRELOAD=sync: all
     loaded before the lowering asks; by default on threads, a program
     asked for first is the caller's, so only taken == loaded holds). A
     stale list (the source now one program, whose key it lacks) loads its
     programs, takes none, runs right, and is written again: the next init
     takes the one program. A damaged list is a corrupt entry, no list
     (nothing ahead), rewritten; KILN_CL_PRELOAD=0 loads nothing ahead. */
  {
    char pdir[600];
    programs_dir_enter("preload", pdir, sizeof pdir);
    setenv("KILN_CL_PRELOAD", "sync", 1);
    run_plan("preload: cold", 2, &d);
    int np = programs;
    char lpath[1024] = "";
    int n_entries = entry(pdir, "", lpath, sizeof lpath);
    CHECK(np >= 3 && preloaded == 0 && preload_used == 0 && n_entries == np + 2,
          "preload: cold: none ahead; %d binaries, the graph record and the list stored (%d entries)", np, n_entries);
    run_plan("preload: warm", 2, &d);
    CHECK(programs == np && preloaded == np && preload_used == np && d.writes == 0 && d.corrupt == 0,
          "preload: warm: %d of %d programs loaded ahead, %d taken, nothing stored", preloaded, np, preload_used);
    CHECK(pre_kernels >= kernels && pre_kernels_used == kernels,
          "preload: warm: %d kernels made ahead, %d taken (the plan's %d)", pre_kernels, pre_kernels_used, kernels);
    unsetenv("KILN_CL_PRELOAD"); /* on threads */
    run_plan("preload: warm, on threads", 2, &d);
    CHECK(programs == np && preload_used == preloaded && preloaded + pre_skipped == np && d.corrupt == 0 &&
              pre_kernels_used <= pre_kernels && pre_kernels_used <= kernels,
          "preload on threads: %d of %d programs loaded ahead and taken (%d), %d left to the lowering; %d kernels "
          "ahead, %d taken", preloaded, np, preload_used, pre_skipped, pre_kernels, pre_kernels_used);
    /* KILN_CL_PRELOAD=hold: each loading thread has claimed a program before the lowering starts and loads it
       only once a take has begun, so the take of a claimed program finds it loading and waits for it */
    setenv("KILN_CL_PRELOAD", "hold", 1);
    run_plan("preload: warm, takes wait for the loads", 2, &d);
    CHECK(programs == np && preload_used == preloaded && preloaded + pre_skipped == np && pre_waited >= 1 &&
              pre_waited <= preload_used && d.corrupt == 0,
          "preload, takes held: %d of %d loaded ahead and taken (%d), %d of them waited for, %d left to the lowering",
          preloaded, np, preload_used, pre_waited, pre_skipped);
    setenv("KILN_CL_PRELOAD", "sync", 1);
    setenv("KILN_CL_PROGRAM_SPLIT", "0", 1);
    run_plan("preload: stale list (one program now)", 2, &d);
    CHECK(programs == 1 && preloaded == np && preload_used == 0 && pre_kernels >= np && pre_kernels_used == 0,
          "preload: stale list: its %d programs loaded, %d taken (none named the one program); %d kernels made "
          "ahead, %d taken", preloaded, preload_used, pre_kernels, pre_kernels_used);
    run_plan("preload: the list written again", 1, &d);
    CHECK(programs == 1 && preloaded == 1 && preload_used == 1 && d.writes == 0,
          "preload: the new list: %d loaded ahead, %d taken", preloaded, preload_used);
    unsetenv("KILN_CL_PRELOAD"); /* one program on a thread: its kernels made there too, raced by the lowering */
    run_plan("preload: one program, on a thread", 2, &d);
    CHECK(programs == 1 && preload_used == preloaded && preloaded + pre_skipped == 1 &&
              pre_kernels_used <= pre_kernels && pre_kernels_used <= kernels && d.corrupt == 0,
          "preload, one program on a thread: %d loaded ahead and taken, %d left to the lowering; %d kernels ahead, %d "
          "taken", preloaded, pre_skipped, pre_kernels, pre_kernels_used);
    /* the one program's take waits for its load; then its loading thread holds the first kernel it makes ahead
       until the lowering's kiln_cl_kernel_create waits for it, and the lowering makes the others it claims first */
    setenv("KILN_CL_PRELOAD", "hold", 1);
    run_plan("preload: one program, its take and a kernel's wait", 2, &d);
    CHECK(programs == 1 && preloaded == 1 && preload_used == 1 && pre_waited == 1 && pre_skipped == 0 &&
              pre_kernels_waited >= 1 && pre_kernels_waited <= pre_kernels_used && pre_kernels_used <= pre_kernels &&
              pre_kernels_used <= kernels && d.corrupt == 0,
          "preload, one program held: %d loaded ahead, %d taken, %d waited for; %d kernels ahead, %d taken, %d waited "
          "for", preloaded, preload_used, pre_waited, pre_kernels, pre_kernels_used, pre_kernels_waited);
    setenv("KILN_CL_PRELOAD", "sync", 1);
    /* the list of one program: the entry of 48 + 16 + 16 bytes (opencl/cache's header, preload.c's list) */
    DIR *dd = opendir(pdir);
    lpath[0] = 0;
    for (struct dirent *e; dd && (e = readdir(dd));) {
      char q[1024];
      snprintf(q, sizeof q, "%s/%s", pdir, e->d_name);
      if (strstr(e->d_name, ".kc") && file_size(q) == 80) snprintf(lpath, sizeof lpath, "%s", q);
    }
    if (dd) closedir(dd);
    CHECK(lpath[0] != 0, "preload: the list's entry (80 bytes) in %s", pdir);
    if (lpath[0]) {
      flip_byte(lpath, 60);
      run_plan("preload: list byte flipped", 1, &d);
      CHECK(d.corrupt == 1 && preloaded == 0 && programs == 1 && file_size(lpath) == 80,
            "preload: a damaged list: corrupt (%llu), none ahead (%d), written again", (unsigned long long)d.corrupt,
            preloaded);
      run_plan("preload: after the damaged list", 1, &d);
      CHECK(preloaded == 1 && preload_used == 1 && d.corrupt == 0, "preload: the rewritten list serves");
    }
    setenv("KILN_CL_PRELOAD", "0", 1);
    run_plan("preload: KILN_CL_PRELOAD=0", 1, &d);
    CHECK(preloaded == 0 && preload_used == 0 && programs == 1, "KILN_CL_PRELOAD=0: none ahead");
    programs_dir_leave();
  }

  /* read-only directory holding the entry: still a hit; a miss still runs */
  if (geteuid() != 0) {
    CHECK(chmod(cdir, 0500) == 0, "make the directory read-only");
    run_plan("read-only directory, entries present", 1, &d);
    CHECK(d.hits == 2, "a read-only cache still serves its entries");
    setenv("KILN_FUSION", "0", 1); /* another key: a miss that cannot be stored */
    run_plan("read-only directory, new key", 2, &d);
    CHECK(d.hits == 1 && d.writes == 0 && d.write_failures == 1 && d.warnings == 1,
          "read-only: runs (the graph record is a hit), the binary's store fails with one warning");
    unsetenv("KILN_FUSION");
    chmod(cdir, 0700);
  } else {
    printf("  (running as root: a read-only mode is not enforced; the unusable-directory case below covers it)\n");
  }
  /* unusable directory: its parent is a regular file */
  char file[600], bad[700];
  snprintf(file, sizeof file, "%s/a-file", root);
  FILE *f = fopen(file, "w");
  if (f) fclose(f);
  snprintf(bad, sizeof bad, "%s/cache", file);
  setenv("KILN_CACHE_DIR", bad, 1);
  run_plan("unusable directory", 2, &d);
  CHECK(d.hits == 0 && d.writes == 0 && d.write_failures == 2 && d.warnings == 1,
        "unusable directory: runs, two stores fail, warned once");
  run_plan("unusable directory again", 2, &d);
  CHECK(d.write_failures == 2 && d.warnings == 0, "no second warning for the same directory");
  /* off */
  setenv("KILN_CACHE_DIR", "off", 1);
  run_plan("KILN_CACHE_DIR=off", 2, &d);
  CHECK(d.hits == 0 && d.writes == 0 && d.write_failures == 0 && d.warnings == 0, "off: nothing read or written");
  test_map(); /* last: its damaged entries would take the process's one warning */

  char tmp[700];
  snprintf(tmp, sizeof tmp, "rm -rf '%s'", root);
  if (system(tmp)) printf("note: could not remove %s\n", root);
  kiln_tensor_release(&x);
  kiln_tensor_release(&ref);
  kiln_graph_free(g);
  printf("opencl_cache: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
