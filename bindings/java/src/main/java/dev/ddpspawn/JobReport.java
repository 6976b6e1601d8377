// How a job's ranks ended and what rank 0 handed back, read from a job or from the last run.
package dev.ddpspawn;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.OptionalInt;

/**
 * A job's end: each rank's {@link RankReport}, the rank whose failure ended it, how many times it
 * restarted, and the bytes rank 0 handed back ({@link Worker#setResult}). Immutable.
 */
public final class JobReport {
  private final List<RankReport> ranks;
  private final int failedRank;
  private final int restarts;
  private final byte[] result;

  private JobReport(List<RankReport> ranks, int failedRank, int restarts, byte[] result) {
    this.ranks = List.copyOf(ranks);
    this.failedRank = failedRank;
    this.restarts = restarts;
    this.result = result;
  }

  /** Every rank's report, in rank order. */
  public List<RankReport> ranks() {
    return ranks;
  }

  /** The rank whose failure ended the job; empty after success, a timeout or an interrupt. */
  public OptionalInt failedRank() {
    return failedRank < 0 ? OptionalInt.empty() : OptionalInt.of(failedRank);
  }

  /** How many times the launcher restarted the ranks (max restarts). */
  public int restarts() {
    return restarts;
  }

  /** A copy of the bytes rank 0 handed back; empty when it set none. */
  public Optional<byte[]> result() {
    return Optional.ofNullable(result).map(byte[]::clone);
  }

  /** Reads the report of a job handle (ddpspawn_job*). */
  static JobReport ofJob(MemorySegment job) {
    try (Arena arena = Arena.ofConfined()) {
      int nprocs = (int) Native.call(Native.JOB_NPROCS, job);
      List<RankReport> ranks = new ArrayList<>(nprocs);
      for (int rank = 0; rank < nprocs; rank++) {
        ranks.add(RankReport.read(rank, Native.JOB_RANK_REPORT, Native.JOB_RANK_ERROR, job, arena));
      }
      MemorySegment data = arena.allocate(ValueLayout.ADDRESS);
      MemorySegment size = arena.allocate(ValueLayout.JAVA_LONG);
      MemorySegment hasResult = arena.allocate(ValueLayout.JAVA_INT);
      Native.check(Native.JOB_RESULT, job, data, size, hasResult);
      byte[] result = null;
      if (hasResult.get(ValueLayout.JAVA_INT, 0) != 0) {
        long bytes = size.get(ValueLayout.JAVA_LONG, 0);
        result = data.get(ValueLayout.ADDRESS, 0).reinterpret(bytes).toArray(ValueLayout.JAVA_BYTE);
      }
      return new JobReport(
          ranks,
          (int) Native.call(Native.JOB_FAILED_RANK, job),
          (int) Native.call(Native.JOB_RESTARTS, job),
          result);
    }
  }

  /**
   * Reads how this thread's last ddpspawn_run ended (no result bytes: a run has key=value pairs).
   */
  static JobReport ofLastRun() {
    try (Arena arena = Arena.ofConfined()) {
      int nprocs = (int) Native.call(Native.RUN_NPROCS);
      List<RankReport> ranks = new ArrayList<>(nprocs);
      for (int rank = 0; rank < nprocs; rank++) {
        ranks.add(
            RankReport.read(rank, Native.RUN_RANK_REPORT, Native.RUN_RANK_ERROR, null, arena));
      }
      return new JobReport(ranks, (int) Native.call(Native.RUN_FAILED_RANK), 0, null);
    }
  }
}
