/* tests/fuzz/replay: runs a fuzz target's LLVMFuzzerTestOneInput over
 * files (or every file of directories) without libFuzzer, so that the
 * regression inputs (tests/fuzz/regress/<target>/) replay in the normal
 * and the sanitizer builds with any compiler. Prints the count; exits 1
 * when no input was found (a test must test something). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    exit(2);
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) {
    fprintf(stderr, "replay: out of memory reading %s\n", path);
    exit(2);
  }
  /* an exact-size copy, so ASan sees reads past the input's end */
  uint8_t *exact = malloc(n ? n : 1);
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 1;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
  int count = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st)) {
      fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
      count += replay_file(argv[i]);
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) return 2;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      names = realloc(names, (n + 1) * sizeof *names);
      names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp);
    for (size_t k = 0; k < n; k++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
      if (!stat(path, &st) && S_ISREG(st.st_mode)) count += replay_file(path);
      free(names[k]);
    }
    free(names);
  }
  printf("replay: %d inputs, no failure\n", count);
  return count ? 0 : 1;
}
