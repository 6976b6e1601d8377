// A communication hook written in Java: how the reducer averages each bucket.
package dev.ddpspawn;

import java.lang.foreign.MemorySegment;

/**
 * Averages one bucket in place, instead of the reducer's built-in all-reduce (the C ABI's
 * ddpspawn_comm_hook). The reducer calls it for every bucket, in the same order on every rank, on
 * the thread that calls {@link Reducer#markReady} or {@link Reducer#finish}; afterwards {@code
 * bucket.data()} must hold the mean over the ranks (or what the hook's compression makes of it).
 * The hook may run collectives on {@code context}, which is valid during the call only. An
 * exception fails the reducer call that ran the hook, with the exception's message (and a {@link
 * DdpspawnException}'s code).
 */
@FunctionalInterface
public interface CommHook {
  void reduce(Context context, Bucket bucket);

  /**
   * One bucket: the gradients of some of the reducer's buffers, back to back in {@code data} (the
   * reducer's memory, valid during the call only), of {@code dtype}.
   */
  record Bucket(int index, int bucketCount, DType dtype, MemorySegment data) {}
}
