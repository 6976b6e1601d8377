// Which dataset indices a rank reads in an epoch: PyTorch's DistributedSampler, index for index.
package dev.ddpspawn;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Shards a dataset of {@code datasetSize} samples across {@code numReplicas} ranks as {@code
 * torch.utils.data.DistributedSampler(dataset, numReplicas, rank, shuffle=True, seed=0,
 * drop_last=False)} does (the C ABI's ddpspawn_distributed_sampler_indices): pass each epoch to
 * {@link #indices} so that the shuffle differs between epochs. Immutable; the {@code with} methods
 * return a copy.
 */
public record DistributedSampler(
    long datasetSize, int numReplicas, int rank, boolean shuffle, long seed, boolean dropLast) {

  /** {@code rank} of {@code numReplicas}, shuffled with seed 0, padded (not dropped). */
  public static DistributedSampler of(long datasetSize, int numReplicas, int rank) {
    return new DistributedSampler(datasetSize, numReplicas, rank, true, 0, false);
  }

  /** This context's rank of its world. */
  public static DistributedSampler of(Context context, long datasetSize) {
    return of(datasetSize, context.worldSize(), context.rank());
  }

  public DistributedSampler withShuffle(boolean enabled) {
    return new DistributedSampler(datasetSize, numReplicas, rank, enabled, seed, dropLast);
  }

  public DistributedSampler withSeed(long value) {
    return new DistributedSampler(datasetSize, numReplicas, rank, shuffle, value, dropLast);
  }

  /** Truncate to a multiple of the replicas instead of padding. */
  public DistributedSampler withDropLast(boolean enabled) {
    return new DistributedSampler(datasetSize, numReplicas, rank, shuffle, seed, enabled);
  }

  /**
   * This rank's indices in {@code epoch}. Bad settings (an empty dataset, a rank out of range,
   * dropLast with fewer samples than replicas, a negative epoch) are {@link
   * DdpspawnException.InvalidArgument}, named.
   */
  public long[] indices(long epoch) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment count = arena.allocate(ValueLayout.JAVA_LONG);
      call(epoch, MemorySegment.NULL, 0, count);
      long n = count.get(ValueLayout.JAVA_LONG, 0);
      MemorySegment out = arena.allocate(ValueLayout.JAVA_LONG, Math.max(1, n));
      call(epoch, out, n, count);
      return out.asSlice(0, n * Long.BYTES).toArray(ValueLayout.JAVA_LONG);
    }
  }

  private void call(long epoch, MemorySegment out, long capacity, MemorySegment count) {
    Native.check(
        Native.DISTRIBUTED_SAMPLER_INDICES,
        datasetSize,
        numReplicas,
        rank,
        shuffle ? 1 : 0,
        seed,
        dropLast ? 1 : 0,
        epoch,
        out,
        capacity,
        count);
  }
}
