// A ddpspawn_status and the calling thread's last error, as a typed exception.
package dev.ddpspawn;

import java.lang.foreign.MemorySegment;

/** Turns status codes into {@link DdpspawnException}s; reads no message text. */
final class Status {
  static final int OK = 0;
  static final int INVALID_ARGUMENT = 1;
  static final int WORKER_FAILED = 2;
  static final int TIMEOUT = 3;
  static final int INTERRUPTED = 4;
  static final int UNAVAILABLE = 5;
  static final int FAILED_PRECONDITION = 6;
  static final int INTERNAL = 7;

  private Status() {}

  /** Throws the exception for {@code code} (with this thread's last error) unless it is OK. */
  static void check(int code) {
    if (code != OK) {
      throw exception(code, lastError(), null);
    }
  }

  /** This thread's last error; read it before any other call, which may replace it. */
  static String lastError() {
    return Native.string((MemorySegment) Native.call(Native.LAST_ERROR));
  }

  /**
   * The exception for a failed {@code code} with its {@code message}, carrying {@code report} where
   * the code has one.
   */
  static DdpspawnException exception(int code, String message, JobReport report) {
    return switch (code) {
      case INVALID_ARGUMENT -> new DdpspawnException.InvalidArgument(message);
      case WORKER_FAILED -> new DdpspawnException.WorkerFailed(message, report);
      case TIMEOUT -> new DdpspawnException.Timeout(message, report);
      case INTERRUPTED -> new DdpspawnException.Interrupted(message, report);
      case UNAVAILABLE -> new DdpspawnException.Unavailable(message);
      case FAILED_PRECONDITION -> new DdpspawnException.FailedPrecondition(message);
      case INTERNAL -> new DdpspawnException.Internal(message);
      default -> new DdpspawnException(code, message, report);
    };
  }
}
