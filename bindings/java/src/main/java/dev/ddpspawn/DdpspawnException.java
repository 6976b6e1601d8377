// The C ABI's errors as exceptions: one subclass per status code.
package dev.ddpspawn;

import java.util.Optional;

/**
 * A failed ddpspawn call: the status code and the library's message, which names the rank and the
 * cause. Catch a subclass to act on one kind of failure; a failure that ended a job (a worker that
 * failed, the job's timeout, an interrupt) carries the {@link JobReport} of how each rank ended.
 * Unchecked, as the library's failures are not part of a method's normal results. Immutable.
 */
public class DdpspawnException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final int code;
  private final transient JobReport report;

  DdpspawnException(int code, String message, JobReport report) {
    super(message);
    this.code = code;
    this.report = report;
  }

  /** The C ABI's status code (DDPSPAWN_ERR_*). */
  public int code() {
    return code;
  }

  /** How each rank of the job ended, when this failure ended a job. */
  public Optional<JobReport> report() {
    return Optional.ofNullable(report);
  }

  /** A null pointer, a wrong size, an unknown name, an out-of-range value. */
  public static final class InvalidArgument extends DdpspawnException {
    private static final long serialVersionUID = 1L;

    InvalidArgument(String message) {
      super(Status.INVALID_ARGUMENT, message, null);
    }
  }

  /** A worker failed; the message and {@link #report()} name the rank and the cause. */
  public static final class WorkerFailed extends DdpspawnException {
    private static final long serialVersionUID = 1L;

    WorkerFailed(String message, JobReport report) {
      super(Status.WORKER_FAILED, message, report);
    }
  }

  /** The job, or a collective, ran past its timeout. */
  public static final class Timeout extends DdpspawnException {
    private static final long serialVersionUID = 1L;

    Timeout(String message, JobReport report) {
      super(Status.TIMEOUT, message, report);
    }
  }

  /** The launcher received SIGINT or SIGTERM and stopped the workers. */
  public static final class Interrupted extends DdpspawnException {
    private static final long serialVersionUID = 1L;

    Interrupted(String message, JobReport report) {
      super(Status.INTERRUPTED, message, report);
    }
  }

  /** Valid, but not available in this build or outside a ddpspawn worker. */
  public static final class Unavailable extends DdpspawnException {
    private static final long serialVersionUID = 1L;

    Unavailable(String message) {
      super(Status.UNAVAILABLE, message, null);
    }
  }

  /** A call in the wrong state. */
  public static final class FailedPrecondition extends DdpspawnException {
    private static final long serialVersionUID = 1L;

    FailedPrecondition(String message) {
      super(Status.FAILED_PRECONDITION, message, null);
    }
  }

  /** A system call or a collective failed (a peer gone, a connection reset ...). */
  public static final class Internal extends DdpspawnException {
    private static final long serialVersionUID = 1L;

    Internal(String message) {
      super(Status.INTERNAL, message, null);
    }
  }
}
