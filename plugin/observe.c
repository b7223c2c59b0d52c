/* plugin/observe: the observer extension functions of kiln_ext.h on a
 * graph handle — start/stop, reading the records, dump-and-reset,
 * histograms and quantization parameters. Each holds the graph's obs_mu,
 * which the worker holds around a run, so it acts between runs. The
 * recording itself is ir/observe's, fed by the engine's hooks. */
#include <math.h>
#include <string.h>

#include "ir/alloc.h"
#include "plugin/plugin.h"

#define MAX_BINS (1u << 24)

static onnxStatus fail(onnxStatus st, kiln_status ks, const char *msg) {
  kiln_fail(ks, "%s", msg);
  return st;
}

/* A file that cannot be written is the host's problem, not kiln's: the
 * message names the file and the reason. */
static onnxStatus file_status(kiln_status s) {
  if (!s) return ONNXIFI_STATUS_SUCCESS;
  return s == KILN_E_NOMEM ? ONNXIFI_STATUS_NO_SYSTEM_MEMORY : ONNXIFI_STATUS_INVALID_NAME;
}

onnxStatus kiln_graph_observe_start(kiln_graph_handle *h, const kilnObserverOptions *opts) {
  kiln_obs_options o = {0};
  if (opts) {
    if (opts->size < sizeof *opts)
      return fail(ONNXIFI_STATUS_INVALID_SIZE, KILN_E_MODEL, "options->size is smaller than kilnObserverOptions");
    if (opts->dumpFrequency && !opts->dumpFile)
      return fail(ONNXIFI_STATUS_INVALID_POINTER, KILN_E_MODEL, "options->dumpFrequency needs a dumpFile");
    if (opts->histogramBins > MAX_BINS)
      return fail(ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, KILN_E_UNSUPPORTED_ATTR,
                  "options->histogramBins is beyond kiln's maximum of 16777216");
    if (opts->flags & ~(uint32_t)(KILN_OBSERVE_ALL | KILN_OBSERVE_RESUME))
      return fail(ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, KILN_E_UNSUPPORTED_ATTR, "options->flags has unknown bits");
    o.nbins = (int)opts->histogramBins;
    o.dump_freq = opts->dumpFrequency;
    o.dump_file = opts->dumpFile;
    o.delim = opts->delimiter;
    o.observe_all = (opts->flags & KILN_OBSERVE_ALL) != 0;
  }
  if (opts && (opts->flags & KILN_OBSERVE_RESUME)) {
    pthread_mutex_lock(&h->obs_mu);
    bool have = h->obs != NULL;
    if (have) h->observing = true;
    pthread_mutex_unlock(&h->obs_mu);
    if (have) return ONNXIFI_STATUS_SUCCESS;
  }
  kiln_obs *obs;
  kiln_status s = kiln_obs_new(h->g, &o, &obs);
  if (s) return kiln_onnx_status(s);
  pthread_mutex_lock(&h->obs_mu);
  kiln_obs_free(h->obs);
  h->obs = obs;
  h->observing = true;
  pthread_mutex_unlock(&h->obs_mu);
  return ONNXIFI_STATUS_SUCCESS;
}

onnxStatus kiln_graph_observe_stop(kiln_graph_handle *h) {
  kiln_status s = KILN_OK;
  pthread_mutex_lock(&h->obs_mu);
  if (!h->obs || !h->observing) {
    pthread_mutex_unlock(&h->obs_mu);
    return fail(ONNXIFI_STATUS_INVALID_STATE, KILN_E_MODEL, "the graph is not being observed");
  }
  h->observing = false;
  const kiln_obs_options *o = kiln_obs_opts(h->obs);
  if (o->dump_file) {
    s = kiln_obs_write_minmax(h->obs, o->dump_file, true);
    char name[4096];
    if (!s && o->nbins) {
      if (!kiln_obs_file_name(o->dump_file, "hist", name, sizeof name))
        s = kiln_fail(KILN_E_INVALID_VALUE, "observer file name '%s' is too long", o->dump_file);
      else s = kiln_obs_write_hist(h->obs, name);
    }
  }
  pthread_mutex_unlock(&h->obs_mu);
  return file_status(s);
}

onnxStatus kiln_graph_observed_ranges(kiln_graph_handle *h, kilnObservedRange *ranges, size_t *count) {
  pthread_mutex_lock(&h->obs_mu);
  if (!h->obs) {
    pthread_mutex_unlock(&h->obs_mu);
    return fail(ONNXIFI_STATUS_INVALID_STATE, KILN_E_MODEL, "the graph has no observer (kilnStartObserving)");
  }
  size_t n = (size_t)kiln_obs_count(h->obs);
  if (!ranges || *count < n) {
    *count = n;
    pthread_mutex_unlock(&h->obs_mu);
    return ONNXIFI_STATUS_FALLBACK;
  }
  for (size_t i = 0; i < n; i++) {
    const kiln_obs_record *r = kiln_obs_record_at(h->obs, (int)i);
    kilnObservedRange *x = &ranges[i];
    memset(x, 0, sizeof *x);
    x->nodeIndex = (uint32_t)r->node;
    x->outputIndex = (uint32_t)r->output;
    x->opType = r->op_type;
    x->tensorName = r->name;
    x->dataType = (uint32_t)r->dtype;
    x->foldedInto = r->folded_into;
    x->erased = r->erased;
    x->min = r->cur.min;
    x->max = r->cur.max;
    x->totalMin = r->total.min;
    x->totalMax = r->total.max;
    x->nanCount = r->cur.nan;
    x->posInfCount = r->cur.pos_inf;
    x->negInfCount = r->cur.neg_inf;
    x->totalNanCount = r->total.nan;
    x->totalPosInfCount = r->total.pos_inf;
    x->totalNegInfCount = r->total.neg_inf;
    x->runs = r->runs;
    x->totalRuns = r->total_runs;
    x->elements = r->cur.count;
    x->totalElements = r->total.count;
  }
  *count = n;
  pthread_mutex_unlock(&h->obs_mu);
  return ONNXIFI_STATUS_SUCCESS;
}

/* The common checks; on success returns with obs_mu held. */
static onnxStatus with_obs(kiln_graph_handle *h, const char *path, bool need_hist, kiln_obs **obs) {
  if (!path) return fail(ONNXIFI_STATUS_INVALID_POINTER, KILN_E_MODEL, "path is NULL");
  pthread_mutex_lock(&h->obs_mu);
  if (!h->obs) {
    pthread_mutex_unlock(&h->obs_mu);
    return fail(ONNXIFI_STATUS_INVALID_STATE, KILN_E_MODEL, "the graph has no observer (kilnStartObserving)");
  }
  if (need_hist && !kiln_obs_wants_values(h->obs)) {
    pthread_mutex_unlock(&h->obs_mu);
    return fail(ONNXIFI_STATUS_INVALID_STATE, KILN_E_MODEL,
                "histograms were not requested (kilnObserverOptions.histogramBins)");
  }
  *obs = h->obs;
  return ONNXIFI_STATUS_SUCCESS; /* obs_mu held */
}

onnxStatus kiln_graph_observe_dump(kiln_graph_handle *h, const char *path) {
  kiln_obs *obs;
  onnxStatus st = with_obs(h, path, false, &obs);
  if (st) return st;
  kiln_status s = kiln_obs_dump_and_reset(obs, path);
  pthread_mutex_unlock(&h->obs_mu);
  return file_status(s);
}

onnxStatus kiln_graph_observe_hist(kiln_graph_handle *h, const char *path) {
  kiln_obs *obs;
  onnxStatus st = with_obs(h, path, true, &obs);
  if (st) return st;
  kiln_status s = kiln_obs_write_hist(obs, path);
  pthread_mutex_unlock(&h->obs_mu);
  return file_status(s);
}

onnxStatus kiln_graph_observe_qparams(kiln_graph_handle *h, const char *path, uint32_t method, uint32_t scheme) {
  if (method > KILN_QPARAMS_KL || scheme > KILN_QPARAMS_SYMMETRIC_INT8)
    return fail(ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, KILN_E_UNSUPPORTED_ATTR,
                "unknown quantization method or scheme (KILN_QPARAMS_*)");
  kiln_obs *obs;
  onnxStatus st = with_obs(h, path, false, &obs);
  if (st) return st;
  kiln_status s = kiln_obs_write_qparams(obs, path, (kiln_obs_qmethod)method, (kiln_obs_qscheme)scheme);
  pthread_mutex_unlock(&h->obs_mu);
  return file_status(s);
}
