/* A communication hook written in C through the public header only: top-k
 * sparsification with error feedback (each rank sends its k largest
 * gradient entries, as indices and values, and keeps what it did not send for
 * the next step). Two ranks (this program re-executed) train a linear
 * regression on their own data, once with the exact mean (the built-in hook)
 * and once through the C hook, and rank 0 reports both losses and the bytes
 * each sent. Also: a hook's error reaches the caller with the rank, the
 * bucket and the hook's own message; the hook is released once; a failed
 * creation leaves it to the caller.
 * Exits 0 when every check passes; prints each failed check.
 */
/* NOLINTNEXTLINE(bugprone-reserved-identifier): POSIX's feature-test macro */
#define _XOPEN_SOURCE 700
#include <ddpspawn/ddpspawn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_check.h"

enum { kFeatures = 128, kRows = 256, kSteps = 150, kTopK = 16 };

/* The top-k hook's state: its error feedback and what it sent. */
typedef struct topk_hook {
  int k;
  float residual[kFeatures]; /* the bucket's entries not sent yet */
  long long bytes_sent;
  int released;
  int fail; /* 1: start fails, saying why */
} topk_hook;

static ddpspawn_status topk_start(void* user_data, ddpspawn_context* ctx,
                                  const ddpspawn_bucket* bucket, void** out_work) {
  topk_hook* hook = (topk_hook*)user_data;
  (void)out_work;
  if (hook->fail) return ddpspawn_set_last_error(DDPSPAWN_ERR_INVALID_ARGUMENT, "top-k says no");
  if (bucket->dtype != DDPSPAWN_FLOAT32 || bucket->count > kFeatures) {
    return ddpspawn_set_last_error(DDPSPAWN_ERR_INVALID_ARGUMENT, "top-k wants <= 128 floats");
  }
  float* g = (float*)bucket->data;
  const int n = (int)bucket->count, k = hook->k;
  for (int i = 0; i < n; i++) g[i] += hook->residual[i];
  /* The k largest magnitudes, by selection (n is small). */
  int32_t index[kTopK];
  float value[kTopK];
  char taken[kFeatures] = {0};
  for (int j = 0; j < k; j++) {
    int best = -1;
    for (int i = 0; i < n; i++) {
      if (!taken[i] && (best < 0 || fabsf(g[i]) > fabsf(g[best]))) best = i;
    }
    taken[best] = 1;
    index[j] = best;
    value[j] = g[best];
  }
  for (int i = 0; i < n; i++) hook->residual[i] = taken[i] ? 0.0f : g[i];
  const int world = ddpspawn_context_world_size(ctx);
  int32_t* all_index = malloc(sizeof(int32_t) * (size_t)(k * world));
  float* all_value = malloc(sizeof(float) * (size_t)(k * world));
  ddpspawn_status status = ddpspawn_all_gather(ctx, index, (size_t)k, DDPSPAWN_INT32, all_index);
  if (status == DDPSPAWN_OK) {
    status = ddpspawn_all_gather(ctx, value, (size_t)k, DDPSPAWN_FLOAT32, all_value);
  }
  if (status == DDPSPAWN_OK) {
    hook->bytes_sent += (long long)(k * (sizeof(int32_t) + sizeof(float)));
    memset(g, 0, sizeof(float) * (size_t)n);
    for (int j = 0; j < k * world; j++) g[all_index[j]] += all_value[j] / (float)world;
  }
  free(all_index);
  free(all_value);
  return status;
}

static void topk_release(void* user_data) { ((topk_hook*)user_data)->released++; }

/* y = X w* on this rank's rows (its own seed); the same w* everywhere. */
static void make_data(int rank, float* x, float* y) {
  unsigned int seed = 1234u + 77u * (unsigned int)rank;
  float truth[kFeatures];
  unsigned int truth_seed = 42u;
  for (int f = 0; f < kFeatures; f++) truth[f] = (float)rand_r(&truth_seed) / RAND_MAX - 0.5f;
  for (int r = 0; r < kRows; r++) {
    y[r] = 0;
    for (int f = 0; f < kFeatures; f++) {
      x[r * kFeatures + f] = 2.0f * ((float)rand_r(&seed) / RAND_MAX - 0.5f);
      y[r] += x[r * kFeatures + f] * truth[f];
    }
  }
}

/* Mean squared error of w on (x, y), and its gradient into grad (may be NULL). */
static double loss_and_gradient(const float* w, const float* x, const float* y, float* grad) {
  double loss = 0;
  if (grad != NULL) memset(grad, 0, sizeof(float) * kFeatures);
  for (int r = 0; r < kRows; r++) {
    double err = -y[r];
    for (int f = 0; f < kFeatures; f++) err += w[f] * x[r * kFeatures + f];
    loss += err * err / kRows;
    if (grad == NULL) continue;
    for (int f = 0; f < kFeatures; f++)
      grad[f] += (float)(2.0 * err * x[r * kFeatures + f] / kRows);
  }
  return loss;
}

/* Trains w from zero with SGD, the gradients averaged through `options`; returns the mean loss over
 * the ranks' data at the end (and at the start in *start). */
static double train(ddpspawn_context* ctx, const ddpspawn_reducer_options* options, const float* x,
                    const float* y, double* start) {
  float w[kFeatures] = {0}, grad[kFeatures];
  void* buffers[1] = {grad};
  size_t counts[1] = {kFeatures};
  int32_t dtypes[1] = {DDPSPAWN_FLOAT32};
  ddpspawn_reducer* reducer = NULL;
  CHECK(ddpspawn_reducer_create(ctx, buffers, counts, dtypes, 1, options, &reducer) == DDPSPAWN_OK);
  if (reducer == NULL) return -1;
  double loss = loss_and_gradient(w, x, y, NULL);
  CHECK(ddpspawn_all_reduce(ctx, &loss, 1, DDPSPAWN_FLOAT64, DDPSPAWN_MEAN) == DDPSPAWN_OK);
  *start = loss;
  for (int step = 0; step < kSteps; step++) {
    loss_and_gradient(w, x, y, grad);
    CHECK(ddpspawn_reducer_mark_ready(reducer, 0) == DDPSPAWN_OK);
    CHECK(ddpspawn_reducer_finalize(reducer) == DDPSPAWN_OK);
    for (int f = 0; f < kFeatures; f++) w[f] -= 0.1f * grad[f];
  }
  ddpspawn_reducer_destroy(reducer);
  loss = loss_and_gradient(w, x, y, NULL);
  CHECK(ddpspawn_all_reduce(ctx, &loss, 1, DDPSPAWN_FLOAT64, DDPSPAWN_MEAN) == DDPSPAWN_OK);
  return loss;
}

static int worker(void) {
  ddpspawn_context* ctx = NULL;
  if (ddpspawn_context_create(NULL, &ctx) != DDPSPAWN_OK) {
    ddpspawn_worker_set_error(ddpspawn_last_error());
    return 1;
  }
  const int rank = ddpspawn_context_rank(ctx);
  static float x[kRows * kFeatures];
  float y[kRows];
  make_data(rank, x, y);

  ddpspawn_reducer_options exact = DDPSPAWN_REDUCER_OPTIONS_INIT;
  double start = 0;
  const double exact_loss = train(ctx, &exact, x, y, &start);

  topk_hook hook = {kTopK, {0}, 0, 0, 0};
  ddpspawn_comm_hook table = {sizeof(ddpspawn_comm_hook), &hook, topk_start, NULL, topk_release};
  ddpspawn_reducer_options sparse = DDPSPAWN_REDUCER_OPTIONS_INIT;
  sparse.custom_comm_hook = &table;
  double sparse_start = 0;
  const double topk_loss = train(ctx, &sparse, x, y, &sparse_start);
  CHECK(hook.released == 1);

  /* The hook's failure, with its message, the rank and the bucket. */
  topk_hook failing = {kTopK, {0}, 0, 0, 1};
  table.user_data = &failing;
  float grad[kFeatures] = {0};
  void* buffers[1] = {grad};
  size_t counts[1] = {kFeatures};
  int32_t dtypes[1] = {DDPSPAWN_FLOAT32};
  ddpspawn_reducer* reducer = NULL;
  CHECK(ddpspawn_reducer_create(ctx, buffers, counts, dtypes, 1, &sparse, &reducer) == DDPSPAWN_OK);
  CHECK(ddpspawn_reducer_mark_ready(reducer, 0) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  char expected[64];
  snprintf(expected, sizeof expected, "rank %d: the C comm hook's start failed on bucket 0", rank);
  CHECK(strstr(ddpspawn_last_error(), expected) != NULL);
  CHECK(strstr(ddpspawn_last_error(), "top-k says no") != NULL);
  ddpspawn_reducer_destroy(reducer);
  CHECK(failing.released == 1);

  /* A hook and a built-in hook at once is refused; the caller keeps the hook. */
  failing.released = 0;
  sparse.comm_hook = "fp16";
  CHECK(ddpspawn_reducer_create(ctx, buffers, counts, dtypes, 1, &sparse, &reducer) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "a reducer runs one hook") != NULL);
  sparse.comm_hook = NULL;
  table.start = NULL;
  CHECK(ddpspawn_reducer_create(ctx, buffers, counts, dtypes, 1, &sparse, &reducer) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "ddpspawn_comm_hook.start is NULL") != NULL);
  CHECK(failing.released == 0);

  if (rank == 0) {
    char result[160];
    snprintf(result, sizeof result, "start=%.6g exact=%.6g topk=%.6g sent=%lld dense=%lld", start,
             exact_loss, topk_loss, hook.bytes_sent,
             (long long)kSteps * kFeatures * (long long)sizeof(float));
    CHECK(ddpspawn_worker_set_result(result, strlen(result)) == DDPSPAWN_OK);
  }
  ddpspawn_context_destroy(ctx);
  if (failures > 0) ddpspawn_worker_set_error("a check failed in the worker (see its stderr)");
  return failures > 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "worker") == 0) return worker();
  char self[4096];
  snprintf(self, sizeof self, "%s", argv[0]);
  const char* worker_argv[] = {self, "worker", NULL};
  ddpspawn_launch_options options = DDPSPAWN_LAUNCH_OPTIONS_INIT;
  options.nprocs = 2;
  options.argv = worker_argv;
  options.timeout_s = 120;
  ddpspawn_job* job = NULL;
  CHECK(ddpspawn_job_create(&options, &job) == DDPSPAWN_OK);
  CHECK(ddpspawn_job_run(job) == DDPSPAWN_OK);
  const void* data = NULL;
  size_t size = 0;
  int32_t has = 0;
  CHECK(ddpspawn_job_result(job, &data, &size, &has) == DDPSPAWN_OK && has == 1);
  char text[256] = {0};
  if (has == 1 && size < sizeof text) memcpy(text, data, size);
  ddpspawn_job_destroy(job);
  printf("%s\n", text);
  double start = 0, exact = 0, topk = 0;
  long long sent = 0, dense = 0;
  CHECK(sscanf(text, "start=%lf exact=%lf topk=%lf sent=%lld dense=%lld", &start, &exact, &topk,
               &sent, &dense) == 5);
  /* 16 of 128 entries a step, as an int32 index and a float32 value: 1/4 of the dense bytes. */
  CHECK(sent == (long long)kSteps * kTopK * 8 && sent * 4 == dense);
  /* Both converge (observed: 3.65 -> 4.4e-4 exact, 3.7e-4 top-k: its error feedback makes up for
   * what each step leaves out), and the hook's sums, not the exact mean, trained the second run. */
  CHECK(exact < 1e-3 * start);
  CHECK(topk < 1e-3 * start);
  CHECK(fabs(topk - exact) > 1e-2 * exact);
  return failures == 0 ? 0 : 1;
}
