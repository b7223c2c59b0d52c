/* plugin/events: single-shot ONNXIFI events. An event is reference
 * counted: the host's handle is one reference and each pending run that
 * waits on it or will signal it holds another, so a host that releases an
 * event early cannot pull it from under a worker. */
#include <string.h>

#include "ir/alloc.h"
#include "plugin/plugin.h"

/* The message an event keeps when copying the run's own failed (memory is
 * short: the run most likely failed for the same reason). Never freed. */
static char kept_no_memory[] = "the run failed, and there was no memory left to keep its message";

kiln_status kiln_event_new(bool from_run, kiln_event **out) {
  kiln_event *e = kiln_calloc(1, sizeof *e);
  if (!e) return kiln_fail(KILN_E_NOMEM, "out of memory creating an event");
  if (pthread_mutex_init(&e->mu, NULL)) {
    kiln_free(e);
    return kiln_fail(KILN_E_NOMEM, "cannot create an event mutex");
  }
  if (pthread_cond_init(&e->cv, NULL)) {
    pthread_mutex_destroy(&e->mu);
    kiln_free(e);
    return kiln_fail(KILN_E_NOMEM, "cannot create an event condition variable");
  }
  e->refs = 1;
  e->from_run = from_run;
  e->status = ONNXIFI_STATUS_SUCCESS;
  *out = e;
  return KILN_OK;
}

void kiln_event_ref(kiln_event *e) {
  pthread_mutex_lock(&e->mu);
  e->refs++;
  pthread_mutex_unlock(&e->mu);
}

void kiln_event_unref(kiln_event *e) {
  pthread_mutex_lock(&e->mu);
  int left = --e->refs;
  pthread_mutex_unlock(&e->mu);
  if (left) return;
  kiln_free(e->notify); /* empty: each entry's run holds a reference */
  pthread_cond_destroy(&e->cv);
  pthread_mutex_destroy(&e->mu);
  if (e->message != kept_no_memory) kiln_free(e->message);
  kiln_free(e);
}

bool kiln_event_signal(kiln_event *e, onnxStatus status, const char *message) {
  pthread_mutex_lock(&e->mu);
  bool was = e->signalled;
  if (!was) {
    e->signalled = true;
    e->status = status;
    if (message && *message && !(e->message = kiln_strdup(message))) e->message = kept_no_memory;
    pthread_cond_broadcast(&e->cv);
  }
  kiln_graph_handle **notify = e->notify;
  int n = e->n_notify;
  e->notify = NULL;
  e->n_notify = e->cap_notify = 0;
  pthread_mutex_unlock(&e->mu);
  /* after the unlock: a graph's lock is never taken under an event's */
  for (int i = 0; i < n; i++) kiln_graph_notify(notify[i]);
  kiln_free(notify);
  return !was;
}

void kiln_event_wait(kiln_event *e) {
  pthread_mutex_lock(&e->mu);
  while (!e->signalled) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}
