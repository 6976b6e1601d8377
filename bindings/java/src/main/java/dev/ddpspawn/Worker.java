// Inside a worker process: whether this is one, and what rank 0 hands back.
package dev.ddpspawn;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.foreign.Arena;

/** What a rank tells its launcher. Stateless; safe from any thread. */
public final class Worker {
  private Worker() {}

  /** True when a ddpspawn launcher started this process. */
  public static boolean isWorker() {
    return (int) Native.call(Native.IS_WORKER) != 0;
  }

  /** Rank 0 hands {@code data} back to the launcher ({@link JobReport#result}). */
  public static void setResult(byte[] data) {
    try (Arena arena = Arena.ofConfined()) {
      Native.check(Native.WORKER_SET_RESULT, Context.bytes(arena, data), (long) data.length);
    }
  }

  /**
   * Runs a rank's {@code body}; when it throws, records the stack trace as this rank's error (the
   * launcher's failure then shows it) and exits with code 1.
   */
  public static void run(Runnable body) {
    try {
      body.run();
    } catch (Throwable t) {
      fail(t);
    }
  }

  /** Records {@code t}'s stack trace as this rank's error (and prints it), then exits with 1. */
  static void fail(Throwable t) {
    StringWriter trace = new StringWriter();
    t.printStackTrace(new PrintWriter(trace));
    System.err.print(trace);
    setError(trace.toString());
    System.exit(1);
  }

  /** Why this rank is failing (a stack trace, say): the launcher's error names it. */
  public static void setError(String text) {
    try (Arena arena = Arena.ofConfined()) {
      Native.check(Native.WORKER_SET_ERROR, arena.allocateFrom(text));
    }
  }
}
