/* The smallest ddpspawn program in C: it launches itself as 2 workers, each adds rank + 1 in an
 * all-reduce, and rank 0 hands the sum back to the launcher. */
#include <ddpspawn/ddpspawn.h>
#include <stdio.h>
#include <string.h>

static int worker(void) {
  ddpspawn_context* ctx = NULL;
  if (ddpspawn_context_create(NULL, &ctx) != DDPSPAWN_OK) {
    ddpspawn_worker_set_error(ddpspawn_last_error());
    return 1;
  }
  double x = ddpspawn_context_rank(ctx) + 1.0;
  int status = ddpspawn_all_reduce(ctx, &x, 1, DDPSPAWN_FLOAT64, DDPSPAWN_SUM);
  if (status == DDPSPAWN_OK && ddpspawn_context_rank(ctx) == 0) {
    status = ddpspawn_worker_set_result(&x, sizeof x);
  }
  if (status != DDPSPAWN_OK) ddpspawn_worker_set_error(ddpspawn_last_error());
  ddpspawn_context_destroy(ctx);
  return status == DDPSPAWN_OK ? 0 : 1;
}

int main(int argc, char** argv) {
  if (ddpspawn_is_worker()) return worker();
  (void)argc;
  const char* worker_argv[] = {argv[0], NULL};
  ddpspawn_launch_options options = DDPSPAWN_LAUNCH_OPTIONS_INIT;
  options.nprocs = 2;
  options.argv = worker_argv;
  ddpspawn_job* job = NULL;
  if (ddpspawn_job_create(&options, &job) != DDPSPAWN_OK || ddpspawn_job_run(job) != DDPSPAWN_OK) {
    fprintf(stderr, "job failed: %s\n", ddpspawn_last_error());
    ddpspawn_job_destroy(job);
    return 1;
  }
  const void* data;
  size_t size;
  int32_t has_result;
  ddpspawn_job_result(job, &data, &size, &has_result);
  double sum;
  memcpy(&sum, data, sizeof sum);
  printf("sum over 2 ranks of rank + 1 = %g\n", sum);
  ddpspawn_job_destroy(job);
  return 0;
}
