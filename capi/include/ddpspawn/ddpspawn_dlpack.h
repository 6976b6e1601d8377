/* ddpspawn's collectives on DLPack tensors: dtype, shape, strides and device travel with the data,
 * so torch, NumPy, JAX or CuPy tensors (and a C program's own memory described as a DLTensor) go
 * straight into a collective without a copy. A separate header so that ddpspawn.h needs no DLPack:
 * this one needs <dlpack/dlpack.h> (any release from 0.6; Debian's libdlpack-dev).
 *
 * Conventions (besides ddpspawn.h's):
 * - Tensors are borrowed: ddpspawn reads and writes a tensor's memory only during the call, and
 *   never frees it or calls a DLManagedTensor's deleter. A DLManagedTensor's dl_tensor (its first
 *   member) is passed as &managed->dl_tensor.
 * - Accepted: CPU memory (kDLCPU, kDLCUDAHost) on either backend, and CUDA memory (kDLCUDA) on a
 *   CUDA build, where it goes to NCCL unchanged (on Gloo it is copied to the CPU and back); element
 *   types float16, bfloat16, float32, float64, int8, uint8, int16, int32, int64 and bool, one lane.
 *   Compact row-major (C-contiguous) layout only: strides may be NULL or the row-major strides of
 *   the shape. Anything else is DDPSPAWN_ERR_INVALID_ARGUMENT naming what is wrong, before any rank
 *   communicates (so a refused call on one rank leaves the others waiting until the group's
 *   timeout, as a missing call would).
 * - Every rank passes the same dtype and element count (and for all_gather the same shape); a
 *   mismatch is an error on every rank that names each rank's call.
 *
 * The flat-buffer collectives of ddpspawn.h stay the simple path for plain C arrays. Valid C99 and
 * C++. */
#ifndef DDPSPAWN_DDPSPAWN_DLPACK_H_
#define DDPSPAWN_DDPSPAWN_DLPACK_H_

#include <dlpack/dlpack.h>

#include "ddpspawn/ddpspawn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* In place: every rank's tensor ends with op (DDPSPAWN_SUM, ...) over all ranks' tensors. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_all_reduce_dlpack(ddpspawn_context* context,
                                                           DLTensor* tensor, int32_t op);

/* In place on dst only; the other ranks' tensors are left as they were. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reduce_dlpack(ddpspawn_context* context, DLTensor* tensor,
                                                       int32_t op, int32_t dst);

/* Overwrites every rank's tensor with src's. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_broadcast_dlpack(ddpspawn_context* context,
                                                          DLTensor* tensor, int32_t src);

/* output gets every rank's input in rank order: it has input's dtype and device and world_size
 * times its elements (shape [world_size, *input's shape], or any compact shape with that many
 * elements). */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_all_gather_dlpack(ddpspawn_context* context,
                                                           const DLTensor* input, DLTensor* output);

/* Reduce-scatter (torch.distributed's reduce_scatter_tensor): input holds world_size equal chunks
 * in rank order (any compact shape), output (input's dtype and device, a world_size-th of its
 * elements, not overlapping it) gets chunk `rank` of op over every rank's input; input is not
 * changed. Added in version node DDPSPAWN_1.1, as ddpspawn_reduce_scatter. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reduce_scatter_dlpack(ddpspawn_context* context,
                                                               const DLTensor* input,
                                                               DLTensor* output, int32_t op);

/* A gradient reducer (ddpspawn.h's ddpspawn_reducer_*) over DLPack tensors instead of flat buffers:
 * each gradient keeps its shape, so the "powersgd" hook compresses those with two or more
 * dimensions (rows: the first dimension) where it sends flat buffers as they are. The tensors'
 * memory is borrowed and must outlive the reducer; the DLTensor structs and their shape arrays need
 * not. mark_ready's index is the gradient's place in `gradients`. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_create_dlpack(
    ddpspawn_context* context, DLTensor* const* gradients, size_t num_gradients,
    const ddpspawn_reducer_options* options, ddpspawn_reducer** out_reducer);

/* gradient_as_bucket_view for a reducer made by ddpspawn_reducer_create or
 * ddpspawn_reducer_create_dlpack: copies each gradient buffer into its slot in its bucket once, and
 * from then on reduces the slots. out_buffers (an array of num_buffers entries, the reducer's
 * number of gradients) gets each slot as a DLManagedTensor of that gradient's shape, dtype and
 * device (on the CPU, memory shared between a launcher's ranks); write each gradient into its
 * tensor before marking it ready, and after finalize it holds the mean: neither copies anything.
 * The caller's own buffers are not used again. Unlike the borrowed tensors above, these are the
 * caller's to release: call each one's deleter when done (it may outlive the reducer). Between
 * iterations only; DDPSPAWN_ERR_FAILED_PRECONDITION with find_unused_parameters (a buffer no rank
 * marked would be zeroed in its slot instead of left untouched). */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_buffers_in_buckets_dlpack(
    ddpspawn_reducer* reducer, DLManagedTensor** out_buffers, size_t num_buffers);

/* Checkpoints of named tensors in the Trainer's format: what `ddpspawn export`, the CLI's validate,
 * test and predict --checkpoint and C++'s Fabric::Load read, and what the Trainer and Fabric::Save
 * write, so a loop of any front end and the Trainer share checkpoints. A checkpoint holds the
 * tensors by name (the model's state) and the global step; no optimizer state, so `ddpspawn fit
 * --resume-from` refuses it.
 *
 * Save: every rank calls it, collectively; rank 0 writes its tensors[i] under names[i] (i < count)
 * and `step` to `path`, atomically (a temporary file, fsync, rename: a crash leaves the old file or
 * none, never a torn one), and every rank returns rank 0's outcome, whose message says why it
 * failed. The other ranks' names and tensors are not read (they may pass count 0). An empty or
 * repeated name is DDPSPAWN_ERR_INVALID_ARGUMENT. Added in version node DDPSPAWN_1.3. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_checkpoint_save_dlpack(ddpspawn_context* context,
                                                                const char* path,
                                                                const char* const* names,
                                                                const DLTensor* const* tensors,
                                                                size_t count, int64_t step);

/* Load: on this rank alone (no collective, no context), reads the checkpoint at `path` into each
 * tensors[i], in place, from its entry names[i]. A name the checkpoint lacks, or an entry of
 * another shape or element type, is DDPSPAWN_ERR_INVALID_ARGUMENT naming it, and then no tensor has
 * been written; a damaged file is refused before anything is read from it. *out_step (may be NULL)
 * gets the checkpoint's step. Added in version node DDPSPAWN_1.3. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_checkpoint_load_dlpack(const char* path,
                                                                const char* const* names,
                                                                DLTensor* const* tensors,
                                                                size_t count, int64_t* out_step);

/* Gradient clipping for a loop's own gradients (Lightning Fabric's clip_gradients), on this rank
 * alone: each gradients[i] (i < count) in place, with the kernels of torch.nn.utils'
 * clip_grad_norm_ and clip_grad_value_, so the result is bit-equal to theirs. Clip the averaged
 * gradients (after the reducer's finalize), and every rank clips alike.
 *
 * By norm: scales the gradients so that their norm_type norm (INFINITY: the largest magnitude) is
 * at most max_norm and writes the norm before clipping to *out_norm (may be NULL). A norm that is
 * not finite is DDPSPAWN_ERR_INVALID_ARGUMENT naming the gradient that holds a NaN or an infinity
 * (by names[i], or as gradients[i] where names is NULL), and nothing is scaled; so are max_norm < 0
 * and norm_type <= 0. Added in version node DDPSPAWN_1.4. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_clip_grad_norm_dlpack(const char* const* names,
                                                               DLTensor* const* gradients,
                                                               size_t count, double max_norm,
                                                               double norm_type, double* out_norm);

/* By value: clamps every element to [-clip_value, clip_value]; a negative or non-finite clip_value
 * is DDPSPAWN_ERR_INVALID_ARGUMENT. Added in version node DDPSPAWN_1.4. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_clip_grad_value_dlpack(DLTensor* const* gradients,
                                                                size_t count, double clip_value);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DDPSPAWN_DDPSPAWN_DLPACK_H_ */
