/* tools/kiln-run: runs an ONNX model through kiln's ONNXIFI plugin the way
 * any ONNXIFI host does — the plugin loaded with Debian's onnxifi_loader,
 * the first backend KILN_DEVICE selects, onnxInitGraph, then onnxSetGraphIO
 * + onnxRunGraph with an input event signalled after RunGraph returns, and
 * onnxWaitEvent — with inputs from TensorProto files, a node-test data set or
 * seeded random data. Prints each output (type, shape, first values,
 * checksums), checks it against expected outputs when given, and reports the
 * load, compile and run times. With no model it runs the bundled examples.
 * `kiln-run --help` documents the options, environment and exit codes. */
#include <onnx/onnxifi_loader.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "include/kiln/kiln_ext.h"
#include "ir/alloc.h"
#include "ir/graph.h"
#include "ir/onnx_import.h"
#include "ir/tensor.h"
#include "tests/testutil.h"

#define PLUGIN_NAME "libonnxifi-kiln.so"
#define MAX_FILES 256
#define MAX_DIMS 64
#define SHOW_VALUES 8
#define PATH_LEN 4096

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* ---- command line ---- */

typedef struct dim_arg {
  const char *name; /* points into argv (not NUL-terminated at '='): see len */
  size_t len;
  int64_t value;
} dim_arg;

static struct {
  const char *lib, *model, *data;
  const char *in_files[MAX_FILES], *out_files[MAX_FILES];
  int n_in_files, n_out_files;
  dim_arg dims[MAX_DIMS];
  int n_dims;
  uint64_t seed;
  long runs, warmup;
  double rtol, atol;
  bool list_backends, stats;
  /* observers */
  bool observe, observe_all, qparams;
  const char *dump;
  uint64_t dump_freq;
  int64_t histogram;
  uint32_t qmethod, qscheme;
} opt = {.seed = 1, .runs = 10, .warmup = 1, .rtol = 1e-4, .atol = 1e-5};

static void usage(FILE *f) {
  fprintf(f,
          "usage: kiln-run [OPTIONS] [MODEL.onnx | TESTDIR]\n"
          "       kiln-run --list-backends [--lib PATH]\n"
          "\n"
          "Runs an ONNX model through kiln's ONNXIFI plugin, loaded as any ONNXIFI host\n"
          "loads it (onnxifi_load, onnxInitBackend, onnxInitGraph, then onnxSetGraphIO +\n"
          "onnxRunGraph + onnxWaitEvent per run), prints each output, checks it against\n"
          "expected outputs when given, and reports load, compile and run times.\n"
          "With no MODEL it runs the bundled example models (cnn.onnx and mlp.onnx, each\n"
          "with its test_data_set_0), from the build's source tree or, when installed,\n"
          "from %s.\n"
          "TESTDIR, an ONNX node-test directory, stands for TESTDIR/model.onnx with\n"
          "--data TESTDIR/test_data_set_0 (unless -i, -o or --data say otherwise).\n"
          "\n"
          "Inputs (graph inputs that have an initializer are weights, not inputs):\n"
          "  -i, --input FILE.pb      a serialized TensorProto for the next graph input;\n"
          "                           repeat once per input, in graph-input order\n"
          "  --data DIR               a node-test data set: DIR/input_K.pb are the inputs,\n"
          "                           DIR/output_K.pb the expected outputs (DIR may also\n"
          "                           be a test directory holding test_data_set_0)\n"
          "  (neither)                seeded random inputs from each input's declared type\n"
          "                           and shape: floats uniform in [-1,1), integers in\n"
          "                           [0,10), bools random\n"
          "  --seed N                 seed of the random inputs (default 1)\n"
          "  --dim NAME=VALUE         size of the symbolic dimension NAME (a dim_param);\n"
          "                           needed for random inputs with symbolic dimensions and\n"
          "                           for output dimensions no input fixes; repeatable\n"
          "\n"
          "Checking:\n"
          "  -o, --expected FILE.pb   expected value (TensorProto) of the next graph output;\n"
          "                           repeat in graph-output order (fewer than all is fine)\n"
          "  --rtol X, --atol X       pass when |got - expected| <= atol + rtol*|expected|\n"
          "                           (default rtol 1e-4, atol 1e-5); other types: exactly\n"
          "\n"
          "Running:\n"
          "  -n, --runs N             timed runs (default 10)\n"
          "  --warmup N               untimed warm-up runs before them (default 1)\n"
          "  --lib PATH               the plugin to load; default: in a build tree\n"
          "                           <build>/plugin/%s, when installed\n"
          "                           <prefix>/%s/%s, else the name as\n"
          "                           the dynamic loader finds it\n"
          "  --stats                  print what kiln made of the graph (extension\n"
          "                           kilnGetGraphStatistics): nodes before/after rewrites,\n"
          "                           views, kernels, memory plans, arena bytes against\n"
          "                           the liveness lower bound and against no reuse\n"
          "  --list-backends          print the backends the plugin offers (NAME, DEVICE,\n"
          "                           DEVICE_TYPE) and exit; kiln-run uses the first\n"
          "  -h, --help               print this help and exit\n"
          "\n"
          "Observers (extensions kilnStartObserving ... kilnWriteQuantizationParams):\n"
          "  --observe                record the value range of every node output over all\n"
          "                           runs (warm-up included) and print a table: node, op\n"
          "                           type, output, tensor, min, max, NaN/+inf/-inf counts\n"
          "  --observe-all            with --observe: turn off the rewrites that erase node\n"
          "                           outputs (BatchNorm folding, CSE, ...) so every node\n"
          "                           output of the model is observed\n"
          "  --dump FILE              write the total ranges to FILE in Caffe2's format\n"
          "                           (op_index op_type output_idx tensor_name min max);\n"
          "                           with --histogram also <stem>_hist<ext>\n"
          "  --dump-freq N            also dump and reset the ranges every N runs, to\n"
          "                           <stem>_<k><ext> (needs --dump)\n"
          "  --histogram N            keep N-bin histograms whose ranges widen across runs\n"
          "                           (cpu and opencl then run the graph unfused, opencl\n"
          "                           reads every observed tensor back: slower)\n"
          "  --qparams                add 8-bit quantization parameters (scale, zero point)\n"
          "                           to the table; with --dump also <stem>_qparams<ext>\n"
          "  --qmethod M              where the range comes from: minmax (default), l2 or\n"
          "                           kl (the error-minimising range of the histogram;\n"
          "                           needs --histogram, else min/max is used)\n"
          "  --qscheme S              uint8 (affine, the default) or int8 (symmetric)\n"
          "--dump, --dump-freq, --histogram and --qparams imply --observe.\n"
          "Options taking a value also accept --option=VALUE.\n"
          "\n"
          "Outputs: the shape of each output is its declared shape, symbolic dimensions\n"
          "taken from --dim or from the inputs' actual shapes; when the model does not\n"
          "declare it, the shape of its expected output. Each output is printed with\n"
          "its type, shape, first %d values and checksums (sum and sum of |x|).\n"
          "\n"
          "Timings: load is onnxifi_load (dlopen) through onnxInitBackend; compile is\n"
          "onnxInitGraph; a run is onnxSetGraphIO through onnxWaitEvent (min and median\n"
          "over the timed runs), all in milliseconds of CLOCK_MONOTONIC.\n"
          "\n"
          "Environment (read by the plugin):\n"
          "  KILN_DEVICE   the backends the plugin offers, in order (kiln-run uses the\n"
          "                first): auto (the default: the best available), cpu,\n"
          "                reference (the scalar reference interpreter), opencl (the\n"
          "                first OpenCL device), opencl:P:D (OpenCL platform P, device D),\n"
          "                or a comma-separated list of these, e.g. opencl:0:1,cpu\n"
          "  KILN_LOG      plugin diagnostics on stderr: error, warn, info or debug\n"
          "                (unset: silent; failures are reported by kiln-run anyway)\n"
          "\n"
          "Exit status:\n"
          "  0   every run succeeded and every checked output passed\n"
          "  1   an output failed its check, or loading the plugin or the model, reading\n"
          "      a data file, compiling or running failed\n"
          "  2   usage error: unknown option, bad or missing option value, or the command\n"
          "      line lacks what the model needs (a --dim, an input or output file)\n",
          KILN_INSTALL_EXAMPLES_DIR, PLUGIN_NAME, KILN_INSTALL_LIBDIR, PLUGIN_NAME, SHOW_VALUES);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kiln-run: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry 'kiln-run --help'.\n");
  va_end(ap);
  return EXIT_USAGE;
}

/* Matches argv[*i] against an option that takes a value: "-s VALUE",
 * "--long VALUE" or "--long=VALUE". Returns 1 with *val set, 0 when it is
 * not this option, -1 when the value is missing. */
static int take(int argc, char **argv, int *i, const char *s, const char *l, char **val) {
  char *a = argv[*i];
  size_t n = strlen(l);
  if ((s && !strcmp(a, s)) || !strcmp(a, l)) {
    if (*i + 1 >= argc) return -1;
    *val = argv[++*i];
    return 1;
  }
  if (!strncmp(a, l, n) && a[n] == '=') {
    *val = a + n + 1;
    return 1;
  }
  return 0;
}

static bool parse_i64(const char *s, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo) return false;
  *out = v;
  return true;
}

static bool parse_u64(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  if (*s == '-') return false;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end) return false;
  *out = v;
  return true;
}

static bool parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0) || isinf(v)) return false;
  *out = v;
  return true;
}

/* Drops trailing slashes from a path argument (argv strings are writable),
 * so that paths built from it read well. */
static char *trim_slashes(char *p) {
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') p[--n] = 0;
  return p;
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv) {
  bool options_done = false;
  for (int i = 1; i < argc; i++) {
    char *a = argv[i], *v = NULL;
    int r;
    int64_t n;
    if (options_done || a[0] != '-' || !a[1]) {
      if (opt.model) return usage_error("more than one model given ('%s')", a);
      opt.model = trim_slashes(a);
      continue;
    }
    if (!strcmp(a, "--")) {
      options_done = true;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return EXIT_OK;
    } else if (!strcmp(a, "--stats")) {
      opt.stats = true;
    } else if (!strcmp(a, "--observe")) {
      opt.observe = true;
    } else if (!strcmp(a, "--observe-all")) {
      opt.observe = opt.observe_all = true;
    } else if (!strcmp(a, "--qparams")) {
      opt.observe = opt.qparams = true;
    } else if ((r = take(argc, argv, &i, NULL, "--dump", &v))) {
      if (r < 0) return usage_error("%s needs a FILE", a);
      opt.dump = v;
      opt.observe = true;
    } else if ((r = take(argc, argv, &i, NULL, "--dump-freq", &v))) {
      if (r < 0 || !parse_u64(v, &opt.dump_freq) || !opt.dump_freq)
        return usage_error("--dump-freq needs a positive count");
      opt.observe = true;
    } else if ((r = take(argc, argv, &i, NULL, "--histogram", &v))) {
      if (r < 0 || !parse_i64(v, 1, &opt.histogram) || opt.histogram > (1 << 24))
        return usage_error("--histogram needs a bin count from 1 to 16777216");
      opt.observe = true;
    } else if ((r = take(argc, argv, &i, NULL, "--qmethod", &v))) {
      if (r < 0) return usage_error("%s needs minmax, l2 or kl", a);
      if (!strcmp(v, "minmax")) opt.qmethod = KILN_QPARAMS_MINMAX;
      else if (!strcmp(v, "l2")) opt.qmethod = KILN_QPARAMS_L2;
      else if (!strcmp(v, "kl")) opt.qmethod = KILN_QPARAMS_KL;
      else return usage_error("--qmethod needs minmax, l2 or kl, not '%s'", v);
      opt.observe = opt.qparams = true;
    } else if ((r = take(argc, argv, &i, NULL, "--qscheme", &v))) {
      if (r < 0) return usage_error("%s needs uint8 or int8", a);
      if (!strcmp(v, "uint8")) opt.qscheme = KILN_QPARAMS_AFFINE_UINT8;
      else if (!strcmp(v, "int8")) opt.qscheme = KILN_QPARAMS_SYMMETRIC_INT8;
      else return usage_error("--qscheme needs uint8 or int8, not '%s'", v);
      opt.observe = opt.qparams = true;
    } else if (!strcmp(a, "--list-backends")) {
      opt.list_backends = true;
    } else if ((r = take(argc, argv, &i, NULL, "--lib", &v))) {
      if (r < 0) return usage_error("%s needs a PATH", a);
      opt.lib = v;
    } else if ((r = take(argc, argv, &i, "-i", "--input", &v))) {
      if (r < 0) return usage_error("%s needs a FILE", a);
      if (opt.n_in_files >= MAX_FILES) return usage_error("too many input files (at most %d)", MAX_FILES);
      opt.in_files[opt.n_in_files++] = v;
    } else if ((r = take(argc, argv, &i, "-o", "--expected", &v))) {
      if (r < 0) return usage_error("%s needs a FILE", a);
      if (opt.n_out_files >= MAX_FILES) return usage_error("too many expected-output files (at most %d)", MAX_FILES);
      opt.out_files[opt.n_out_files++] = v;
    } else if ((r = take(argc, argv, &i, NULL, "--data", &v))) {
      if (r < 0) return usage_error("%s needs a DIR", a);
      opt.data = trim_slashes(v);
    } else if ((r = take(argc, argv, &i, NULL, "--seed", &v))) {
      if (r < 0 || !parse_u64(v, &opt.seed)) return r < 0 ? usage_error("%s needs a non-negative integer", a) : usage_error("--seed needs a non-negative integer, not '%s'", v);
    } else if ((r = take(argc, argv, &i, "-n", "--runs", &v))) {
      if (r < 0 || !parse_i64(v, 1, &n) || n > 1000000) return r < 0 ? usage_error("%s needs a count from 1 to 1000000", a) : usage_error("-n needs a count from 1 to 1000000, not '%s'", v);
      opt.runs = (long)n;
    } else if ((r = take(argc, argv, &i, NULL, "--warmup", &v))) {
      if (r < 0 || !parse_i64(v, 0, &n) || n > 1000000) return r < 0 ? usage_error("%s needs a count from 0 to 1000000", a) : usage_error("--warmup needs a count from 0 to 1000000, not '%s'", v);
      opt.warmup = (long)n;
    } else if ((r = take(argc, argv, &i, NULL, "--rtol", &v))) {
      if (r < 0 || !parse_double(v, &opt.rtol)) return r < 0 ? usage_error("%s needs a non-negative number", a) : usage_error("--rtol needs a non-negative number, not '%s'", v);
    } else if ((r = take(argc, argv, &i, NULL, "--atol", &v))) {
      if (r < 0 || !parse_double(v, &opt.atol)) return r < 0 ? usage_error("%s needs a non-negative number", a) : usage_error("--atol needs a non-negative number, not '%s'", v);
    } else if ((r = take(argc, argv, &i, NULL, "--dim", &v))) {
      if (r < 0) return usage_error("%s needs NAME=VALUE", a);
      const char *eq = strchr(v, '=');
      if (!eq || eq == v || !parse_i64(eq + 1, 1, &n))
        return usage_error("--dim needs NAME=VALUE with a positive VALUE, not '%s'", v);
      if (opt.n_dims >= MAX_DIMS) return usage_error("too many --dim options (at most %d)", MAX_DIMS);
      for (int k = 0; k < opt.n_dims; k++)
        if (opt.dims[k].len == (size_t)(eq - v) && !strncmp(opt.dims[k].name, v, opt.dims[k].len))
          return usage_error("--dim %s: this symbol is given twice", v);
      opt.dims[opt.n_dims++] = (dim_arg){v, (size_t)(eq - v), n};
    } else {
      return usage_error("unknown option '%s'", a);
    }
  }
  if (opt.data && (opt.n_in_files || opt.n_out_files))
    return usage_error("--data cannot be combined with -i or -o");
  if (opt.dump_freq && !opt.dump) return usage_error("--dump-freq needs --dump FILE");
  if (!opt.model && !opt.list_backends && (opt.data || opt.n_in_files || opt.n_out_files || opt.n_dims))
    return usage_error("-i, -o, --data and --dim need a MODEL argument");
  return -1;
}

/* ---- small helpers ---- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static bool file_exists(const char *path) { return *path && access(path, R_OK) == 0; }

/* snprintf for paths: false, with buf "", when the result does not fit. */
static bool path_fmt(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool path_fmt(char *buf, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, size, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < size) return true;
  if (size) buf[0] = 0;
  return false;
}

/* The directory of the running executable (from /proc/self/exe), or "". */
static const char *exe_dir(void) {
  static char dir[PATH_LEN];
  static bool done;
  if (!done) {
    done = true;
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0) n = 0;
    dir[n] = 0;
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else dir[0] = 0;
  }
  return dir;
}

static const char *status_name(onnxStatus s) {
  switch (s) {
#define S(x) case ONNXIFI_STATUS_##x: return "ONNXIFI_STATUS_" #x;
    S(SUCCESS) S(FALLBACK) S(INVALID_ID) S(INVALID_SIZE) S(INVALID_POINTER) S(INVALID_PROTOBUF)
    S(INVALID_MODEL) S(INVALID_BACKEND) S(INVALID_GRAPH) S(INVALID_EVENT) S(INVALID_STATE) S(INVALID_NAME)
    S(INVALID_SHAPE) S(INVALID_DATATYPE) S(INVALID_MEMORY_TYPE) S(INVALID_MEMORY_LOCATION)
    S(INVALID_FENCE_TYPE) S(INVALID_PROPERTY) S(UNSUPPORTED_TAG) S(UNSUPPORTED_VERSION)
    S(UNSUPPORTED_OPERATOR) S(UNSUPPORTED_ATTRIBUTE) S(UNSUPPORTED_SHAPE) S(UNSUPPORTED_DATATYPE)
    S(UNSUPPORTED_MEMORY_TYPE) S(UNSUPPORTED_FENCE_TYPE) S(UNSUPPORTED_PROPERTY) S(UNIDENTIFIED_NAME)
    S(MISMATCHING_SHAPE) S(MISMATCHING_DATATYPE) S(NO_SYSTEM_MEMORY) S(NO_DEVICE_MEMORY)
    S(NO_SYSTEM_RESOURCES) S(NO_DEVICE_RESOURCES) S(BACKEND_UNAVAILABLE) S(INTERNAL_ERROR)
#undef S
  default: return "unknown ONNXIFI status";
  }
}

static const char *device_type_name(uint64_t t) {
  switch (t) {
  case ONNXIFI_DEVICE_TYPE_NPU: return "NPU";
  case ONNXIFI_DEVICE_TYPE_DSP: return "DSP";
  case ONNXIFI_DEVICE_TYPE_GPU: return "GPU";
  case ONNXIFI_DEVICE_TYPE_CPU: return "CPU";
  case ONNXIFI_DEVICE_TYPE_FPGA: return "FPGA";
  case ONNXIFI_DEVICE_TYPE_HETEROGENEOUS: return "HETEROGENEOUS";
  default: return "unknown";
  }
}

/* ---- the plugin ---- */

static struct onnxifi_library lib;
static bool lib_loaded;
static onnxBackendID *ids;
static size_t n_ids;
static onnxBackend backend;
static kilnGetLastErrorMessageFunction last_error;
static kilnGetEventStatusFunction event_status;
static kilnGetGraphStatisticsFunction graph_stats;
static kilnStartObservingFunction obs_start;
static kilnStopObservingFunction obs_stop;
static kilnGetObservedRangesFunction obs_ranges;
static kilnWriteQuantizationParamsFunction obs_qparams;
static char plugin_path[PATH_LEN];
static double load_ms;

/* The calling thread's last plugin message, copied (the plugin's copy lasts
 * only until the next call). */
static const char *plugin_msg(void) {
  static char buf[2048];
  const char *m = NULL;
  if (!last_error || last_error(&m) != ONNXIFI_STATUS_SUCCESS || !m || !*m) return "(no message)";
  snprintf(buf, sizeof buf, "%s", m);
  return buf;
}

static int fail_call(const char *call, onnxStatus st) {
  const char *m = plugin_msg();
  fprintf(stderr, "kiln-run: %s failed: %s (0x%04x): %s\n", call, status_name(st), (unsigned)st, m);
  return EXIT_FAIL;
}

static void pick_plugin_path(void) {
  if (opt.lib) {
    path_fmt(plugin_path, sizeof plugin_path, "%s", opt.lib);
    return;
  }
  /* /proc/self/exe is canonical, so the parent of its directory is the
   * textual one. Build tree: <build>/tools/kiln-run beside <build>/plugin/.
   * Installed: <prefix>/bin/kiln-run beside <prefix>/<libdir>/ (so a
   * relocated install finds its own plugin). Else the dynamic loader's
   * search path. */
  const char *dir = exe_dir(), *slash = strrchr(dir, '/');
  if (slash) {
    int parent = (int)(slash - dir);
    if (path_fmt(plugin_path, sizeof plugin_path, "%.*s/plugin/" PLUGIN_NAME, parent, dir) &&
        file_exists(plugin_path))
      return;
    if ((KILN_INSTALL_LIBDIR[0] == '/'
             ? path_fmt(plugin_path, sizeof plugin_path, "%s/" PLUGIN_NAME, KILN_INSTALL_LIBDIR)
             : path_fmt(plugin_path, sizeof plugin_path, "%.*s/%s/" PLUGIN_NAME, parent, dir, KILN_INSTALL_LIBDIR)) &&
        file_exists(plugin_path))
      return;
  }
  snprintf(plugin_path, sizeof plugin_path, "%s", PLUGIN_NAME);
}

static void plugin_close(void) {
  if (backend && lib.onnxReleaseBackend(backend))
    fprintf(stderr, "kiln-run: onnxReleaseBackend failed: %s\n", plugin_msg());
  backend = NULL;
  for (size_t b = 0; b < n_ids; b++)
    if (ids[b] && lib.onnxReleaseBackendID(ids[b]))
      fprintf(stderr, "kiln-run: onnxReleaseBackendID failed: %s\n", plugin_msg());
  free(ids);
  ids = NULL;
  n_ids = 0;
  if (lib_loaded) onnxifi_unload(&lib);
  lib_loaded = false;
}

/* Loads the plugin and fetches its backend IDs (and the extension functions
 * through the first). */
static int plugin_open(void) {
  pick_plugin_path();
  double t0 = now_ms();
  dlerror();
  if (!onnxifi_load(ONNXIFI_LOADER_FLAG_VERSION_1_0, plugin_path, &lib)) {
    const char *e = dlerror();
    fprintf(stderr, "kiln-run: cannot load the plugin %s: %s\n", plugin_path,
            e ? e : "it lacks an ONNXIFI 1.0 function");
    if (!opt.lib) fprintf(stderr, "kiln-run: give its path with --lib PATH\n");
    return EXIT_FAIL;
  }
  lib_loaded = true;
  size_t n = 0;
  onnxStatus st = lib.onnxGetBackendIDs(NULL, &n);
  if (st != ONNXIFI_STATUS_FALLBACK && st != ONNXIFI_STATUS_SUCCESS) {
    /* No ID to fetch kilnGetLastErrorMessage through: the plugin itself
     * prints configuration errors (a bad KILN_DEVICE) to stderr. */
    fprintf(stderr, "kiln-run: onnxGetBackendIDs failed: %s (0x%04x); check KILN_DEVICE\n", status_name(st),
            (unsigned)st);
    return EXIT_FAIL;
  }
  if (!n) {
    fprintf(stderr, "kiln-run: the plugin offers no backend (KILN_DEVICE=%s)\n",
            getenv("KILN_DEVICE") ? getenv("KILN_DEVICE") : "");
    return EXIT_FAIL;
  }
  ids = calloc(n, sizeof *ids);
  if (!ids) {
    fprintf(stderr, "kiln-run: out of memory\n");
    return EXIT_FAIL;
  }
  n_ids = n;
  st = lib.onnxGetBackendIDs(ids, &n_ids);
  if (st) {
    n_ids = 0;
    fprintf(stderr, "kiln-run: onnxGetBackendIDs failed: %s (0x%04x)\n", status_name(st), (unsigned)st);
    return EXIT_FAIL;
  }
  /* Debian's loader is built without ONNXIFI_ENABLE_EXT: fetch it by hand. */
  onnxGetExtensionFunctionAddressFunction get_ext =
      (onnxGetExtensionFunctionAddressFunction)dlsym(lib.handle, "onnxGetExtensionFunctionAddress");
  onnxExtensionFunctionPointer fp;
  if (get_ext && !get_ext(ids[0], "kilnGetLastErrorMessage", &fp))
    last_error = (kilnGetLastErrorMessageFunction)(void (*)(void))fp;
  if (get_ext && !get_ext(ids[0], "kilnGetEventStatus", &fp))
    event_status = (kilnGetEventStatusFunction)(void (*)(void))fp;
  if (get_ext && !get_ext(ids[0], "kilnGetGraphStatistics", &fp))
    graph_stats = (kilnGetGraphStatisticsFunction)(void (*)(void))fp;
  if (get_ext && !get_ext(ids[0], "kilnStartObserving", &fp)) obs_start = (kilnStartObservingFunction)(void (*)(void))fp;
  if (get_ext && !get_ext(ids[0], "kilnStopObserving", &fp)) obs_stop = (kilnStopObservingFunction)(void (*)(void))fp;
  if (get_ext && !get_ext(ids[0], "kilnGetObservedRanges", &fp))
    obs_ranges = (kilnGetObservedRangesFunction)(void (*)(void))fp;
  if (get_ext && !get_ext(ids[0], "kilnWriteQuantizationParams", &fp))
    obs_qparams = (kilnWriteQuantizationParamsFunction)(void (*)(void))fp;
  if (!opt.list_backends) {
    st = lib.onnxInitBackend(ids[0], NULL, &backend);
    if (st) return fail_call("onnxInitBackend", st);
  }
  load_ms = now_ms() - t0;
  return EXIT_OK;
}

static void backend_string(onnxBackendID id, onnxBackendInfo what, char *buf, size_t size) {
  size_t sz = size;
  if (lib.onnxGetBackendInfo(id, what, buf, &sz)) snprintf(buf, size, "?");
  buf[size - 1] = 0;
}

static uint64_t backend_u64(onnxBackendID id, onnxBackendInfo what) {
  uint64_t v = 0;
  size_t sz = sizeof v;
  if (lib.onnxGetBackendInfo(id, what, &v, &sz)) return UINT64_MAX;
  return v;
}

static void list_backends(void) {
  printf("plugin: %s\n", plugin_path);
  for (size_t b = 0; b < n_ids; b++) {
    char name[256], dev[256];
    backend_string(ids[b], ONNXIFI_BACKEND_NAME, name, sizeof name);
    backend_string(ids[b], ONNXIFI_BACKEND_DEVICE, dev, sizeof dev);
    uint64_t t = backend_u64(ids[b], ONNXIFI_BACKEND_DEVICE_TYPE);
    printf("backend %zu%s: NAME=%s DEVICE=\"%s\" DEVICE_TYPE=%s\n", b, b ? "" : " (used)", name, dev,
           device_type_name(t));
  }
}

/* ---- one model ---- */

typedef struct sym {
  const char *name;
  size_t len;
  int64_t value;
  const char *from; /* "--dim" or the input's name */
} sym;

typedef struct model_run {
  void *bytes;
  size_t size;
  kiln_graph *g;
  int nin, nout;
  int *in_val;              /* value index of each runtime input */
  kiln_tensor *ins, *outs, *exp;
  bool *has_exp;
  char **in_src, **exp_src; /* where each input / expected output came from (malloc'd) */
  onnxTensorDescriptorV1 *din, *dout;
  uint64_t (*shp)[KILN_MAX_RANK];
  double *times;
  onnxGraph graph;
  sym syms[MAX_DIMS * 2];
  int nsyms;
} model_run;

static void model_free(model_run *m) {
  if (m->graph && lib.onnxReleaseGraph(m->graph))
    fprintf(stderr, "kiln-run: onnxReleaseGraph failed: %s\n", plugin_msg());
  for (int i = 0; m->ins && i < m->nin; i++) kiln_tensor_release(&m->ins[i]);
  for (int o = 0; m->outs && o < m->nout; o++) kiln_tensor_release(&m->outs[o]);
  for (int o = 0; m->exp && o < m->nout; o++) kiln_tensor_release(&m->exp[o]);
  for (int i = 0; m->in_src && i < m->nin; i++) free(m->in_src[i]);
  for (int o = 0; m->exp_src && o < m->nout; o++) free(m->exp_src[o]);
  free(m->in_src);
  free(m->exp_src);
  free(m->in_val);
  free(m->ins);
  free(m->outs);
  free(m->exp);
  free(m->has_exp);
  free(m->din);
  free(m->dout);
  free(m->shp);
  free(m->times);
  free(m->bytes);
  if (m->g) kiln_graph_free(m->g);
  memset(m, 0, sizeof *m);
}

/* Reads a whole regular file (malloc'd; *size its length). Prints why and
 * returns NULL on failure. (Not tu_read_file: it takes a directory's
 * ftell() of LONG_MAX for a size.) */
static void *read_file(const char *path, size_t *size) {
  struct stat st;
  FILE *f = NULL;
  char *buf = NULL;
  if (stat(path, &st)) goto fail;
  if (!S_ISREG(st.st_mode)) {
    fprintf(stderr, "kiln-run: %s: not a regular file\n", path);
    return NULL;
  }
  if (!(f = fopen(path, "rb"))) goto fail;
  size_t n = (size_t)st.st_size;
  if (!(buf = malloc(n + 1))) goto fail;
  if (fread(buf, 1, n, f) != n) {
    if (!ferror(f)) errno = EIO; /* shrank while reading */
    goto fail;
  }
  fclose(f);
  *size = n;
  return buf;
fail:
  fprintf(stderr, "kiln-run: cannot read %s: %s\n", path, strerror(errno));
  free(buf);
  if (f) fclose(f);
  return NULL;
}

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* Reads a TensorProto file into t. Returns 0 or prints why and returns 1. */
static int read_tensor(const char *path, kiln_tensor *t, char **name) {
  size_t size = 0;
  void *bytes = read_file(path, &size);
  if (!bytes) return 1;
  char *kname = NULL;
  kiln_status s = kiln_tensor_parse(bytes, size, t, name ? &kname : NULL);
  free(bytes);
  if (s) {
    fprintf(stderr, "kiln-run: %s: %s: %s\n", path, kiln_status_name(s), kiln_last_error());
    return 1;
  }
  if (name) {
    *name = kname && *kname ? dupstr(kname) : NULL;
    kiln_free(kname);
  }
  return 0;
}

static sym *find_sym(model_run *m, const char *name) {
  for (int k = 0; k < m->nsyms; k++)
    if (strlen(name) == m->syms[k].len && !strncmp(m->syms[k].name, name, m->syms[k].len)) return &m->syms[k];
  return NULL;
}

static bool model_has_symbol(const kiln_graph *g, const char *name, size_t len) {
  for (int v = 0; v < g->n_values; v++) {
    const kiln_type *t = &g->values[v].type;
    for (int d = 0; d < t->rank; d++)
      if (t->dims[d].param && strlen(t->dims[d].param) == len && !strncmp(t->dims[d].param, name, len)) return true;
  }
  return false;
}

/* splitmix64 */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1) on a grid the dtype holds exactly (so rounding can
 * never reach 1): bits = the dtype's significand precision. */
static double rng_signed_unit(uint64_t *s, int bits) {
  uint64_t k = rng_next(s) >> (64 - bits);
  return -1.0 + ldexp((double)k, 1 - bits);
}

static void fill_random(kiln_tensor *t, uint64_t *state) {
  int bits = t->dtype == KILN_F64 ? 53 : t->dtype == KILN_F32 ? 24 : t->dtype == KILN_F16 ? 11 : 8;
  for (int64_t i = 0; i < t->numel; i++) {
    if (kiln_dtype_is_float(t->dtype)) kiln_set_f(t, i, rng_signed_unit(state, bits));
    else if (t->dtype == KILN_BOOL) kiln_set_i(t, i, (int64_t)(rng_next(state) >> 63));
    else kiln_set_i(t, i, (int64_t)(rng_next(state) % 10));
  }
}

/* Resolves a declared type's shape with the symbol bindings. Returns 0, or
 * 1 with *bad_dim the first unresolvable dimension and *bad_sym its symbol
 * (NULL for a dimension with neither size nor name). */
static int resolve_shape(model_run *m, const kiln_type *t, int64_t *dims, int *bad_dim, const char **bad_sym) {
  for (int d = 0; d < t->rank; d++) {
    if (t->dims[d].value >= 0) {
      dims[d] = t->dims[d].value;
      continue;
    }
    sym *s = t->dims[d].param ? find_sym(m, t->dims[d].param) : NULL;
    if (!s) {
      *bad_dim = d;
      *bad_sym = t->dims[d].param;
      return 1;
    }
    dims[d] = s->value;
  }
  return 0;
}

/* Loads or makes the inputs, and reads expected outputs. */
static int prepare_inputs(model_run *m, const char *data_dir) {
  const kiln_graph *g = m->g;
  char path[PATH_LEN];
  for (int k = 0; k < opt.n_dims; k++) {
    m->syms[m->nsyms++] = (sym){opt.dims[k].name, opt.dims[k].len, opt.dims[k].value, "--dim"};
    if (!model_has_symbol(g, opt.dims[k].name, opt.dims[k].len))
      fprintf(stderr, "kiln-run: warning: --dim %.*s: the model has no dimension named so\n", (int)opt.dims[k].len,
              opt.dims[k].name);
  }
  if (!data_dir && opt.n_in_files && opt.n_in_files != m->nin) {
    fprintf(stderr, "kiln-run: the model has %d input%s (not counting weights), %d -i file%s given\n", m->nin,
            m->nin == 1 ? "" : "s", opt.n_in_files, opt.n_in_files == 1 ? "" : "s");
    return EXIT_USAGE;
  }
  if (!data_dir && opt.n_out_files > m->nout) {
    fprintf(stderr, "kiln-run: the model has %d output%s, %d -o files given\n", m->nout, m->nout == 1 ? "" : "s",
            opt.n_out_files);
    return EXIT_USAGE;
  }
  /* Inputs from files. */
  if (data_dir || opt.n_in_files) {
    for (int i = 0; i < m->nin; i++) {
      const char *name = g->values[m->in_val[i]].name;
      const char *file = opt.in_files[i];
      if (data_dir) {
        path_fmt(path, sizeof path, "%s/input_%d.pb", data_dir, i);
        if (!file_exists(path)) {
          fprintf(stderr, "kiln-run: %s/input_%d.pb: no such file for input %d '%s'\n", data_dir, i, i, name);
          return EXIT_FAIL;
        }
        file = path;
      }
      char *tname = NULL;
      if (read_tensor(file, &m->ins[i], &tname)) return EXIT_FAIL;
      if (tname && strcmp(tname, name))
        fprintf(stderr, "kiln-run: warning: %s holds tensor '%s', used as input %d '%s'\n", file, tname, i, name);
      free(tname);
      if (!(m->in_src[i] = dupstr(file))) return EXIT_FAIL;
      /* Bind the input's symbolic dimensions to its actual shape. */
      const kiln_type *t = &g->values[m->in_val[i]].type;
      if (t->rank != m->ins[i].rank) continue; /* the plugin reports the mismatch */
      for (int d = 0; d < t->rank; d++) {
        const char *p = t->dims[d].param;
        if (!p) continue;
        sym *s = find_sym(m, p);
        int64_t v = m->ins[i].dims[d];
        if (!s) {
          if (m->nsyms < MAX_DIMS * 2) m->syms[m->nsyms++] = (sym){p, strlen(p), v, name};
        } else if (s->value != v) {
          fprintf(stderr, "kiln-run: symbol '%s' is %" PRId64 " from %s%s%s, but input '%s' dimension %d is %" PRId64
                  "\n", p, s->value, strcmp(s->from, "--dim") ? "input '" : "", s->from,
                  strcmp(s->from, "--dim") ? "'" : "", name, d, v);
          return EXIT_USAGE;
        }
      }
    }
  } else {
    /* Random inputs from the declared types. */
    uint64_t state = opt.seed;
    for (int i = 0; i < m->nin; i++) {
      const kiln_value *val = &g->values[m->in_val[i]];
      const kiln_type *t = &val->type;
      if (t->kind != KILN_TYPE_TENSOR || !kiln_dtype_supported(t->dtype) || t->rank < 0) {
        fprintf(stderr,
                "kiln-run: input '%s' has no declared dense tensor type and shape to make random data from; "
                "give the inputs with -i or --data\n",
                val->name);
        return EXIT_USAGE;
      }
      int64_t dims[KILN_MAX_RANK];
      int bad = -1;
      const char *bsym = NULL;
      if (resolve_shape(m, t, dims, &bad, &bsym)) {
        if (bsym)
          fprintf(stderr, "kiln-run: input '%s' dimension %d is the symbol '%s': give its size with --dim %s=VALUE\n",
                  val->name, bad, bsym, bsym);
        else
          fprintf(stderr, "kiln-run: input '%s' dimension %d has neither a size nor a name; give the inputs with "
                  "-i or --data\n", val->name, bad);
        return EXIT_USAGE;
      }
      kiln_status s = kiln_tensor_alloc(&m->ins[i], t->dtype, t->rank, dims);
      if (s) {
        fprintf(stderr, "kiln-run: input '%s': %s: %s\n", val->name, kiln_status_name(s), kiln_last_error());
        return EXIT_FAIL;
      }
      fill_random(&m->ins[i], &state);
      char src[64];
      snprintf(src, sizeof src, "random (seed %" PRIu64 ")", opt.seed);
      if (!(m->in_src[i] = dupstr(src))) return EXIT_FAIL;
    }
  }
  /* Expected outputs. */
  for (int o = 0; o < m->nout; o++) {
    const char *file;
    if (data_dir) {
      if (!path_fmt(path, sizeof path, "%s/output_%d.pb", data_dir, o) || !file_exists(path)) continue;
      file = path;
    } else if (o < opt.n_out_files) {
      file = opt.out_files[o];
    } else {
      continue;
    }
    char *tname = NULL;
    if (read_tensor(file, &m->exp[o], &tname)) return EXIT_FAIL;
    const char *name = g->values[g->outputs[o]].name;
    if (tname && strcmp(tname, name))
      fprintf(stderr, "kiln-run: warning: %s holds tensor '%s', used as output %d '%s'\n", file, tname, o, name);
    free(tname);
    m->has_exp[o] = true;
    if (!(m->exp_src[o] = dupstr(file))) return EXIT_FAIL;
  }
  return EXIT_OK;
}

/* Decides each output's type and shape and allocates it. */
static int prepare_outputs(model_run *m) {
  const kiln_graph *g = m->g;
  for (int o = 0; o < m->nout; o++) {
    const kiln_value *val = &g->values[g->outputs[o]];
    const kiln_type *t = &val->type;
    kiln_dtype dt = t->dtype;
    if (dt == KILN_UNDEFINED && m->has_exp[o]) dt = m->exp[o].dtype;
    if (dt == KILN_UNDEFINED) {
      fprintf(stderr, "kiln-run: output '%s' has no declared type; give its expected value with -o or --data\n",
              val->name);
      return EXIT_USAGE;
    }
    int64_t dims[KILN_MAX_RANK];
    int rank = t->rank, bad = -1;
    const char *bsym = NULL;
    if (rank < 0 || resolve_shape(m, t, dims, &bad, &bsym)) {
      if (m->has_exp[o]) {
        rank = m->exp[o].rank;
        memcpy(dims, m->exp[o].dims, sizeof dims);
      } else if (rank < 0) {
        fprintf(stderr,
                "kiln-run: output '%s' has no declared shape; give its expected value with -o or --data\n",
                val->name);
        return EXIT_USAGE;
      } else if (bsym) {
        fprintf(stderr,
                "kiln-run: output '%s' dimension %d is the symbol '%s', which no input fixes: give its size with "
                "--dim %s=VALUE (or the expected output with -o or --data)\n",
                val->name, bad, bsym, bsym);
        return EXIT_USAGE;
      } else {
        fprintf(stderr,
                "kiln-run: output '%s' dimension %d has neither a size nor a name: give the expected output with -o "
                "or --data (or declare the dimension with a dim_param and use --dim)\n",
                val->name, bad);
        return EXIT_USAGE;
      }
    }
    kiln_status s = kiln_tensor_alloc(&m->outs[o], dt, rank, dims);
    if (s) {
      fprintf(stderr, "kiln-run: output '%s': %s: %s\n", val->name, kiln_status_name(s), kiln_last_error());
      return EXIT_FAIL;
    }
  }
  return EXIT_OK;
}

static void make_descriptors(model_run *m) {
  const kiln_graph *g = m->g;
  for (int k = 0; k < m->nin + m->nout; k++) {
    bool is_in = k < m->nin;
    kiln_tensor *t = is_in ? &m->ins[k] : &m->outs[k - m->nin];
    int v = is_in ? m->in_val[k] : g->outputs[k - m->nin];
    for (int d = 0; d < t->rank; d++) m->shp[k][d] = (uint64_t)t->dims[d];
    onnxTensorDescriptorV1 desc = {ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, g->values[v].name, (onnxEnum)t->dtype,
                                   ONNXIFI_MEMORY_TYPE_CPU, (uint32_t)t->rank, m->shp[k],
                                   (onnxPointer)(uintptr_t)t->data};
    if (is_in) m->din[k] = desc;
    else m->dout[k - m->nin] = desc;
  }
}

/* One run: SetGraphIO, RunGraph with an input event signalled afterwards,
 * WaitEvent. Returns 0 or prints the failure and returns EXIT_FAIL. */
static int run_once(model_run *m, double *ms) {
  double t0 = now_ms();
  onnxStatus st = lib.onnxSetGraphIO(m->graph, (uint32_t)m->nin, m->din, (uint32_t)m->nout, m->dout);
  if (st) return fail_call("onnxSetGraphIO", st);
  onnxEvent in_ev = NULL;
  st = lib.onnxInitEvent(backend, &in_ev);
  if (st) return fail_call("onnxInitEvent", st);
  onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {in_ev}};
  onnxMemoryFenceV1 fout = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  int rc = EXIT_OK;
  st = lib.onnxRunGraph(m->graph, &fin, &fout);
  if (st) rc = fail_call("onnxRunGraph", st);
  /* Signal the input event after RunGraph returns, as the ONNX test driver
   * does (and also when RunGraph failed: nothing waits on it then). */
  onnxStatus sst = lib.onnxSignalEvent(in_ev);
  if (sst && !rc) rc = fail_call("onnxSignalEvent", sst);
  if (!rc) {
    st = lib.onnxWaitEvent(fout.event);
    *ms = now_ms() - t0;
    if (st) {
      char wmsg[2048];
      snprintf(wmsg, sizeof wmsg, "%s", plugin_msg());
      onnxStatus rs = ONNXIFI_STATUS_SUCCESS;
      const char *em = NULL;
      if (event_status && !event_status(fout.event, &rs, &em) && rs)
        fprintf(stderr, "kiln-run: run failed: %s (0x%04x): %s\n", status_name(rs), (unsigned)rs,
                em && *em ? em : wmsg);
      else
        fprintf(stderr, "kiln-run: onnxWaitEvent failed: %s (0x%04x): %s\n", status_name(st), (unsigned)st, wmsg);
      rc = EXIT_FAIL;
    }
  }
  if (fout.event && lib.onnxReleaseEvent(fout.event) && !rc) rc = fail_call("onnxReleaseEvent", ONNXIFI_STATUS_INVALID_EVENT);
  if (lib.onnxReleaseEvent(in_ev) && !rc) rc = fail_call("onnxReleaseEvent", ONNXIFI_STATUS_INVALID_EVENT);
  return rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void print_value(const kiln_tensor *t, int64_t i) {
  if (kiln_dtype_is_float(t->dtype)) printf("%.6g", kiln_get_f(t, i));
  else if (t->dtype == KILN_BOOL) printf("%s", kiln_get_i(t, i) ? "true" : "false");
  else if (t->dtype == KILN_U64) printf("%" PRIu64, (uint64_t)kiln_get_i(t, i));
  else printf("%" PRId64, kiln_get_i(t, i));
}

static double as_double(const kiln_tensor *t, int64_t i) {
  if (kiln_dtype_is_float(t->dtype)) return kiln_get_f(t, i);
  if (t->dtype == KILN_U64) return (double)(uint64_t)kiln_get_i(t, i);
  return (double)kiln_get_i(t, i);
}

/* Prints one output; returns 1 when it fails its check. */
static int report_output(model_run *m, int o) {
  const kiln_tensor *t = &m->outs[o];
  char shape[256];
  printf("output %d '%s': %s %s\n", o, m->g->values[m->g->outputs[o]].name, kiln_dtype_name(t->dtype),
         kiln_shape_str(t->rank, t->dims, shape, sizeof shape));
  printf("  values:   ");
  for (int64_t i = 0; i < t->numel && i < SHOW_VALUES; i++) {
    if (i) printf(" ");
    print_value(t, i);
  }
  printf("%s\n", t->numel > SHOW_VALUES ? " ..." : "");
  double sum = 0, asum = 0;
  for (int64_t i = 0; i < t->numel; i++) {
    double v = as_double(t, i);
    sum += v;
    asum += fabs(v);
  }
  printf("  checksum: sum %.9g, sum|x| %.9g\n", sum, asum);
  if (!m->has_exp[o]) return 0;
  char msg[512] = "";
  double mabs = 0, mrel = 0;
  int ok = tu_compare(t, &m->exp[o], opt.rtol, opt.atol, msg, sizeof msg, &mabs, &mrel);
  const kiln_tensor *e = &m->exp[o];
  bool comparable = e->dtype == t->dtype && e->rank == t->rank;
  for (int d = 0; comparable && d < t->rank; d++) comparable = e->dims[d] == t->dims[d];
  if (comparable && !kiln_dtype_is_float(e->dtype)) {
    /* tu_compare gives errors for floats only; integers: the largest |diff|. */
    for (int64_t i = 0; i < e->numel; i++) {
      double d = fabs(as_double(t, i) - as_double(e, i)), ad = fabs(as_double(e, i));
      if (d > mabs) mabs = d;
      if (d / (ad > 0 ? ad : 1) > mrel) mrel = d / (ad > 0 ? ad : 1);
    }
  }
  printf("  expected: %s\n", m->exp_src[o]);
  if (comparable)
    printf("  max abs err %.3g, max rel err %.3g (rtol %g, atol %g): %s\n", mabs, mrel, opt.rtol, opt.atol,
           ok ? "PASS" : "FAIL");
  else
    printf("  not comparable: FAIL\n");
  if (!ok) printf("  mismatch: %s\n", msg);
  return !ok;
}

/* Runs one model; data_dir (may be NULL) is a node-test data set. */
/* ---- observers ---- */

static int observe_start(model_run *m) {
  if (!obs_start || !obs_stop || !obs_ranges || !obs_qparams) {
    fprintf(stderr, "kiln-run: --observe: this plugin has no observer extensions\n");
    return EXIT_FAIL;
  }
  kilnObserverOptions o = {sizeof o, opt.observe_all ? KILN_OBSERVE_ALL : 0, (uint32_t)opt.histogram, opt.dump_freq,
                           opt.dump, 0};
  onnxStatus st = obs_start(m->graph, &o);
  return st ? fail_call("kilnStartObserving", st) : EXIT_OK;
}

/* "<stem>_<suffix><ext>" of FILE, as the plugin names its companions. */
static void companion(char *buf, size_t size, const char *file, const char *suffix) {
  const char *slash = strrchr(file, '/'), *dot = strrchr(file, '.');
  size_t stem = dot && (!slash || slash < dot) ? (size_t)(dot - file) : strlen(file);
  snprintf(buf, size, "%.*s_%s%s", (int)stem, file, suffix, file + stem);
}

typedef struct qline {
  char name[256], scale[64], zp[32];
} qline;

/* Stops observing, prints the table of ranges (and qparams), names the files. */
static int observe_finish(model_run *m) {
  onnxStatus st = obs_stop(m->graph);
  if (st) return fail_call("kilnStopObserving", st);
  size_t n = 0;
  st = obs_ranges(m->graph, NULL, &n);
  if (st != ONNXIFI_STATUS_FALLBACK && st) return fail_call("kilnGetObservedRanges", st);
  kilnObservedRange *r = calloc(n + 1, sizeof *r);
  if (!r) return EXIT_FAIL;
  if ((st = obs_ranges(m->graph, r, &n))) {
    free(r);
    return fail_call("kilnGetObservedRanges", st);
  }
  /* qparams: through the plugin's writer, read back for the table */
  qline *q = NULL;
  int nq = 0;
  char qfile[PATH_LEN] = "";
  if (opt.qparams) {
    if (opt.dump) companion(qfile, sizeof qfile, opt.dump, "qparams");
    else snprintf(qfile, sizeof qfile, "/tmp/kiln-run-qparams.%ld.txt", (long)getpid());
    if ((st = obs_qparams(m->graph, qfile, opt.qmethod, opt.qscheme))) {
      free(r);
      return fail_call("kilnWriteQuantizationParams", st);
    }
    FILE *f = fopen(qfile, "r");
    q = calloc(n + 1, sizeof *q);
    char line[1024];
    while (f && q && nq < (int)n && fgets(line, sizeof line, f)) {
      char f1[64], f2[128], f3[64], f5[64], f6[64];
      if (sscanf(line, "%63s %127s %63s %255s %63s %63s %63s %31s", f1, f2, f3, q[nq].name, f5, f6, q[nq].scale,
                 q[nq].zp) == 8)
        nq++;
    }
    if (f) fclose(f);
    if (!opt.dump) unlink(qfile);
  }
  uint64_t runs = 0;
  int recorded = 0, folded = 0;
  for (size_t i = 0; i < n; i++) {
    runs = r[i].totalRuns > runs ? r[i].totalRuns : runs;
    recorded += r[i].totalRuns > 0;
    folded += r[i].foldedInto >= 0 || r[i].erased;
  }
  printf("observe: %zu node outputs, %d recorded over %llu run%s, %d folded or erased by rewrites%s\n", n, recorded,
         (unsigned long long)runs, runs == 1 ? "" : "s", folded, opt.observe_all ? " (observe all)" : "");
  printf("  %4s %-20s %3s %-28s %14s %14s %6s %6s %6s%s\n", "node", "op", "out", "tensor", "min", "max", "nan",
         "+inf", "-inf", opt.qparams ? "          scale    zp" : "");
  for (size_t i = 0; i < n; i++) {
    const kilnObservedRange *x = &r[i];
    printf("  %4u %-20s %3u %-28s ", x->nodeIndex, x->opType, x->outputIndex, x->tensorName);
    if (x->foldedInto >= 0 && (size_t)x->foldedInto < n)
      printf("(folded into %s)\n", r[x->foldedInto].tensorName);
    else if (x->erased)
      printf("(erased by a rewrite)\n");
    else if (!x->totalRuns)
      printf("(not recorded)\n"); /* not a number tensor, or the backend did not report it */
    else {
      printf("%14.7g %14.7g %6llu %6llu %6llu", x->totalMin, x->totalMax, (unsigned long long)x->totalNanCount,
             (unsigned long long)x->totalPosInfCount, (unsigned long long)x->totalNegInfCount);
      for (int k = 0; k < nq; k++)
        if (!strcmp(q[k].name, x->tensorName)) {
          printf(" %14.7g %5s", strtod(q[k].scale, NULL), q[k].zp);
          break;
        }
      printf("\n");
    }
  }
  if (!recorded && n)
    printf("observe: warning: the backend recorded nothing\n");
  if (opt.dump) {
    printf("observe: wrote %s (total ranges)", opt.dump);
    char buf[PATH_LEN];
    if (opt.histogram) {
      companion(buf, sizeof buf, opt.dump, "hist");
      printf(", %s (histograms)", buf);
    }
    if (opt.dump_freq) {
      companion(buf, sizeof buf, opt.dump, "<k>");
      printf(", %s every %llu runs", buf, (unsigned long long)opt.dump_freq);
    }
    if (opt.qparams) printf(", %s (qparams)", qfile);
    printf("\n");
  }
  free(q);
  free(r);
  return EXIT_OK;
}

static int run_model(const char *path, const char *data_dir) {
  model_run m = {0};
  model_run *mp = &m;
  int rc = EXIT_OK;
  printf("== %s\n", path);
  m.bytes = read_file(path, &m.size);
  if (!m.bytes) return EXIT_FAIL;
  kiln_status ks = kiln_onnx_import(m.bytes, m.size, &m.g);
  if (ks) {
    fprintf(stderr, "kiln-run: %s: %s: %s\n", path, kiln_status_name(ks), kiln_last_error());
    m.g = NULL;
    model_free(mp);
    return EXIT_FAIL;
  }
  const kiln_graph *g = m.g;
  m.nout = g->n_outputs;
  m.in_val = calloc((size_t)g->n_inputs + 1, sizeof *m.in_val);
  for (int i = 0; m.in_val && i < g->n_inputs; i++)
    if (!g->values[g->inputs[i]].init) m.in_val[m.nin++] = g->inputs[i];
  size_t ni = (size_t)m.nin + 1, no = (size_t)m.nout + 1;
  m.ins = calloc(ni, sizeof *m.ins);
  m.in_src = calloc(ni, sizeof *m.in_src);
  m.din = calloc(ni, sizeof *m.din);
  m.outs = calloc(no, sizeof *m.outs);
  m.exp = calloc(no, sizeof *m.exp);
  m.has_exp = calloc(no, sizeof *m.has_exp);
  m.exp_src = calloc(no, sizeof *m.exp_src);
  m.dout = calloc(no, sizeof *m.dout);
  m.shp = calloc(ni + no, sizeof *m.shp);
  m.times = calloc((size_t)opt.runs, sizeof *m.times);
  if (!m.in_val || !m.ins || !m.in_src || !m.din || !m.outs || !m.exp || !m.has_exp || !m.exp_src || !m.dout ||
      !m.shp || !m.times) {
    fprintf(stderr, "kiln-run: out of memory\n");
    model_free(mp);
    return EXIT_FAIL;
  }
  char name[256], dev[256];
  backend_string(ids[0], ONNXIFI_BACKEND_NAME, name, sizeof name);
  backend_string(ids[0], ONNXIFI_BACKEND_DEVICE, dev, sizeof dev);
  printf("plugin:  %s\n", plugin_path);
  printf("backend: %s, device \"%s\" [%s]\n", name, dev,
         device_type_name(backend_u64(ids[0], ONNXIFI_BACKEND_DEVICE_TYPE)));
  int64_t opset = kiln_graph_opset(g, "");
  int ninit = 0;
  for (int v = 0; v < g->n_values; v++) ninit += g->values[v].init != NULL;
  printf("model:   graph '%s', IR version %" PRId64 ", opset %" PRId64 ", %d node%s, %d input%s, %d initializer%s, "
         "%d output%s\n",
         g->name ? g->name : "", g->ir_version, opset, g->n_nodes, g->n_nodes == 1 ? "" : "s", m.nin,
         m.nin == 1 ? "" : "s", ninit, ninit == 1 ? "" : "s", m.nout, m.nout == 1 ? "" : "s");
  if ((rc = prepare_inputs(mp, data_dir)) || (rc = prepare_outputs(mp))) {
    model_free(mp);
    return rc;
  }
  for (int i = 0; i < m.nin; i++) {
    char shape[256];
    printf("input %d '%s': %s %s from %s\n", i, g->values[m.in_val[i]].name, kiln_dtype_name(m.ins[i].dtype),
           kiln_shape_str(m.ins[i].rank, m.ins[i].dims, shape, sizeof shape), m.in_src[i]);
  }
  make_descriptors(mp);
  fflush(stdout);

  double t0 = now_ms();
  onnxStatus st = lib.onnxInitGraph(backend, NULL, m.size, m.bytes, 0, NULL, &m.graph);
  double compile_ms = now_ms() - t0;
  if (st) {
    m.graph = NULL;
    rc = fail_call("onnxInitGraph", st);
    model_free(mp);
    return rc;
  }
  if (opt.observe && (rc = observe_start(mp))) {
    model_free(mp);
    return rc;
  }
  for (long r = 0; r < opt.warmup + opt.runs; r++) {
    double ms = 0;
    if ((rc = run_once(mp, &ms))) {
      model_free(mp);
      return rc;
    }
    if (r >= opt.warmup) m.times[r - opt.warmup] = ms;
  }
  int failed = 0;
  for (int o = 0; o < m.nout; o++) failed += report_output(mp, o);
  qsort(m.times, (size_t)opt.runs, sizeof *m.times, cmp_double);
  double med = opt.runs % 2 ? m.times[opt.runs / 2] : (m.times[opt.runs / 2 - 1] + m.times[opt.runs / 2]) / 2;
  printf("timing:  load %.3f ms, compile %.3f ms, run min %.3f ms, median %.3f ms (%ld run%s after %ld warm-up)\n",
         load_ms, compile_ms, m.times[0], med, opt.runs, opt.runs == 1 ? "" : "s", opt.warmup);
  if (opt.stats) {
    kilnGraphStatistics gs;
    memset(&gs, 0, sizeof gs);
    gs.size = sizeof gs;
    if (!graph_stats || graph_stats(m.graph, &gs)) {
      printf("stats:   not available from this plugin\n");
    } else {
      printf("stats:   nodes %llu imported%s, %llu after rewrites (%llu views, %llu kernels); %llu memory plan%s\n",
             (unsigned long long)gs.nodesImported, gs.importedFromCache ? " (read from the kiln cache)" : "",
             (unsigned long long)gs.nodesPlanned,
             (unsigned long long)gs.viewNodes, (unsigned long long)gs.kernelNodes,
             (unsigned long long)gs.memoryPlans, gs.memoryPlans == 1 ? "" : "s");
      printf("rewrite: %llu folded, %llu BatchNorm folded, %llu CSE merged, %llu no-ops removed, "
             "%llu transposes merged, %llu dead nodes removed\n",
             (unsigned long long)gs.foldedNodes, (unsigned long long)gs.batchNormsFolded,
             (unsigned long long)gs.cseMerged, (unsigned long long)gs.noOpsRemoved,
             (unsigned long long)gs.transposesMerged, (unsigned long long)gs.deadNodesRemoved);
      if (gs.memoryPlans)
        printf("memory:  arena %llu bytes = %.3fx the liveness lower bound (%llu), %.3fx no reuse (%llu); "
               "%llu view%s materialised\n",
               (unsigned long long)gs.arenaBytes,
               gs.lowerBoundBytes ? (double)gs.arenaBytes / (double)gs.lowerBoundBytes : 1.0,
               (unsigned long long)gs.lowerBoundBytes,
               gs.noReuseBytes ? (double)gs.arenaBytes / (double)gs.noReuseBytes : 1.0,
               (unsigned long long)gs.noReuseBytes, (unsigned long long)gs.materializedViews,
               gs.materializedViews == 1 ? "" : "s");
      printf("fusion:  %llu fused group%s covering %llu nodes\n", (unsigned long long)gs.fusedGroups,
             gs.fusedGroups == 1 ? "" : "s", (unsigned long long)gs.fusedNodes);
    }
  }
  if (opt.observe && (rc = observe_finish(mp))) {
    model_free(mp);
    return rc;
  }
  int checked = 0;
  for (int o = 0; o < m.nout; o++) checked += m.has_exp[o];
  if (checked)
    printf("result:  %s (%d of %d output%s checked)\n", failed ? "FAIL" : "PASS", checked, m.nout,
           m.nout == 1 ? "" : "s");
  else
    printf("result:  ran (no expected outputs to check)\n");
  model_free(mp);
  return failed ? EXIT_FAIL : EXIT_OK;
}

/* A data-set directory: DIR itself when it holds input_0.pb or output_0.pb,
 * else DIR/test_data_set_0 when that exists. */
static const char *data_set_dir(const char *dir, char *buf, size_t size) {
  if (path_fmt(buf, size, "%s/input_0.pb", dir) && file_exists(buf)) return dir;
  if (path_fmt(buf, size, "%s/output_0.pb", dir) && file_exists(buf)) return dir;
  if (path_fmt(buf, size, "%s/test_data_set_0", dir) && file_exists(buf)) return buf;
  return dir;
}

/* The bundled examples' directory: next to an installed kiln-run
 * (<prefix>/share/kiln/examples), the source tree's, or the configured
 * install prefix's. */
static const char *examples_dir(char *buf, size_t size) {
  const char *cands[3] = {NULL, KILN_EXAMPLES_DIR, KILN_INSTALL_EXAMPLES_DIR};
  char rel[PATH_LEN];
  if (*exe_dir()) {
    const char *slash = strrchr(exe_dir(), '/');
    if (slash && KILN_INSTALL_DATADIR[0] != '/' &&
        path_fmt(rel, sizeof rel, "%.*s/%s/kiln/examples", (int)(slash - exe_dir()), exe_dir(), KILN_INSTALL_DATADIR))
      cands[0] = rel;
  }
  for (int k = 0; k < 3; k++) {
    if (!cands[k]) continue;
    if (path_fmt(buf, size, "%s/cnn.onnx", cands[k]) && file_exists(buf) && path_fmt(buf, size, "%s", cands[k]))
      return buf;
  }
  return NULL;
}

int main(int argc, char **argv) {
  int rc = parse_args(argc, argv);
  if (rc >= 0) return rc;
  if ((rc = plugin_open())) {
    plugin_close();
    return rc;
  }
  if (opt.list_backends) {
    list_backends();
    plugin_close();
    return EXIT_OK;
  }
  if (opt.model) {
    char buf[PATH_LEN], model[PATH_LEN];
    const char *path = opt.model, *data = opt.data ? data_set_dir(opt.data, buf, sizeof buf) : NULL;
    struct stat st;
    /* A node-test directory: its model.onnx, and by default its data set. */
    if (!stat(opt.model, &st) && S_ISDIR(st.st_mode) && path_fmt(model, sizeof model, "%s/model.onnx", opt.model)) {
      path = model;
      if (!data && !opt.n_in_files && !opt.n_out_files) data = data_set_dir(opt.model, buf, sizeof buf);
    }
    rc = run_model(path, data);
  } else {
    char dir[PATH_LEN];
    if (!examples_dir(dir, sizeof dir)) {
      fprintf(stderr, "kiln-run: the bundled examples are not found (looked in %s and %s)\n", KILN_EXAMPLES_DIR,
              KILN_INSTALL_EXAMPLES_DIR);
      plugin_close();
      return EXIT_FAIL;
    }
    static const char *const models[] = {"cnn", "mlp"};
    int failed = 0;
    for (int k = 0; k < 2; k++) {
      char model[PATH_LEN], data[PATH_LEN];
      path_fmt(model, sizeof model, "%s/%s.onnx", dir, models[k]);
      path_fmt(data, sizeof data, "%s/%s/test_data_set_0", dir, models[k]);
      if (k) printf("\n");
      int r = run_model(model, data);
      failed += r != EXIT_OK;
      if (r > rc) rc = r;
      fflush(stdout);
    }
    printf("\nkiln-run: %d of 2 example models passed\n", 2 - failed);
  }
  plugin_close();
  return rc;
}
