// How one rank of a job ended: ddpspawn_rank_report and the error text the rank reported.
package dev.ddpspawn;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/**
 * One rank's end: its state, exit code or signal, pid, whether the launcher stopped it (after
 * another rank's failure, a timeout or an interrupt) and the error text it reported ("" if none).
 */
public record RankReport(
    int rank,
    State state,
    int exitCode,
    int signal,
    long pid,
    boolean stoppedByLauncher,
    String error) {

  /** DDPSPAWN_RANK_*. */
  public enum State {
    NOT_STARTED,
    RUNNING,
    EXITED,
    SIGNALED
  }

  // struct ddpspawn_rank_report: uint32 struct_size, int32 state, exit_code, signal, int64 pid,
  // int32 stopped_by_launcher (and padding to 32 bytes).
  static final long SIZE = 32;

  /** Reads rank {@code rank}'s report with {@code reportFn} (job or last run) and its error. */
  static RankReport read(
      int rank, MethodHandle reportFn, MethodHandle errorFn, MemorySegment job, Arena arena) {
    MemorySegment report = arena.allocate(SIZE, 8);
    Native.check(Native.RANK_REPORT_INIT_SIZED, report, (int) SIZE);
    MemorySegment text = arena.allocate(ValueLayout.ADDRESS);
    if (job == null) {
      Native.check(reportFn, rank, report);
      Native.check(errorFn, rank, text);
    } else {
      Native.check(reportFn, job, rank, report);
      Native.check(errorFn, job, rank, text);
    }
    return new RankReport(
        rank,
        State.values()[report.get(ValueLayout.JAVA_INT, 4)],
        report.get(ValueLayout.JAVA_INT, 8),
        report.get(ValueLayout.JAVA_INT, 12),
        report.get(ValueLayout.JAVA_LONG, 16),
        report.get(ValueLayout.JAVA_INT, 24) != 0,
        Native.string(text.get(ValueLayout.ADDRESS, 0)));
  }
}
