/* Collectives on DLPack tensors from C: it launches itself as 2 workers; each describes its own 2x3
 * float matrix as a DLTensor (shape and dtype travel with the data) and all-reduces it in place,
 * and rank 0 hands the summed matrix back to the launcher. */
#include <ddpspawn/ddpspawn.h>
#include <ddpspawn/ddpspawn_dlpack.h>
#include <stdio.h>
#include <string.h>

static int worker(void) {
  ddpspawn_context* ctx = NULL;
  if (ddpspawn_context_create(NULL, &ctx) != DDPSPAWN_OK) {
    ddpspawn_worker_set_error(ddpspawn_last_error());
    return 1;
  }
  float matrix[2][3];
  for (int i = 0; i < 6; i++) matrix[i / 3][i % 3] = (float)(i * (ddpspawn_context_rank(ctx) + 1));
  int64_t shape[2] = {2, 3};
  DLTensor tensor;
  memset(&tensor, 0, sizeof tensor);
  tensor.data = matrix;
  tensor.device.device_type = kDLCPU;
  tensor.ndim = 2;
  tensor.shape = shape;
  tensor.strides = NULL; /* row-major */
  tensor.dtype.code = kDLFloat;
  tensor.dtype.bits = 32;
  tensor.dtype.lanes = 1;
  int status = ddpspawn_all_reduce_dlpack(ctx, &tensor, DDPSPAWN_SUM);
  if (status == DDPSPAWN_OK && ddpspawn_context_rank(ctx) == 0) {
    status = ddpspawn_worker_set_result(matrix, sizeof matrix);
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
  float sum[2][3];
  if (ddpspawn_job_result(job, &data, &size, &has_result) != DDPSPAWN_OK || !has_result ||
      size != sizeof sum) {
    fprintf(stderr, "no result from rank 0\n");
    ddpspawn_job_destroy(job);
    return 1;
  }
  memcpy(sum, data, sizeof sum);
  printf("summed 2x3 matrix: [[%g %g %g] [%g %g %g]]\n", sum[0][0], sum[0][1], sum[0][2], sum[1][0],
         sum[1][1], sum[1][2]);
  ddpspawn_job_destroy(job);
  return 0;
}
