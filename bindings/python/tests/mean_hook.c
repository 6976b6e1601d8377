/* A communication hook written in C for test_c_comm_hook.py, loaded from Python through
 * ddpspawn.CCommHook: the mean over the ranks through ddpspawn's all-reduce, scaled by the factor
 * its state holds (1 unless mean_hook_scale_next sets another, before the reducer is made), and a
 * count of the buckets it averaged in this process. */
#include <ddpspawn/ddpspawn.h>
#include <stdlib.h>

typedef struct mean_hook {
  float scale;
} mean_hook;

static float next_scale = 1.0f;
static long long buckets_averaged = 0;
static long long states_released = 0;

void mean_hook_scale_next(float scale) { next_scale = scale; }
long long mean_hook_buckets_averaged(void) { return buckets_averaged; }
long long mean_hook_states_released(void) { return states_released; }

void* mean_hook_make(void) {
  mean_hook* hook = malloc(sizeof(mean_hook));
  if (hook != NULL) hook->scale = next_scale;
  return hook;
}

void mean_hook_release(void* user_data) {
  free(user_data);
  ++states_released;
}

ddpspawn_status mean_hook_start(void* user_data, ddpspawn_context* context,
                                const ddpspawn_bucket* bucket, void** out_work) {
  (void)out_work;
  if (bucket->dtype != DDPSPAWN_FLOAT32) {
    return ddpspawn_set_last_error(DDPSPAWN_ERR_INVALID_ARGUMENT, "mean_hook averages float32");
  }
  ddpspawn_status status =
      ddpspawn_all_reduce(context, bucket->data, bucket->count, bucket->dtype, DDPSPAWN_MEAN);
  if (status != DDPSPAWN_OK) return status;
  float* data = (float*)bucket->data;
  const float scale = ((const mean_hook*)user_data)->scale;
  for (size_t i = 0; i < bucket->count; ++i) data[i] *= scale;
  ++buckets_averaged;
  return DDPSPAWN_OK;
}
