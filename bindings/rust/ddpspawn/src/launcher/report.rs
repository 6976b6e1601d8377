// The outcome of a job or a training run: the `Report` of how every rank
// ended, each rank's `RankReport` and `RankState`. Plain data: reading it from
// the library is report_reading.rs's, attaching it to an error error.rs's.

/// How a rank ended (`DDPSPAWN_RANK_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RankState {
    /// Never started (the job failed before reaching it).
    NotStarted,
    /// Still running (not seen in a finished job's report).
    Running,
    /// Exited by itself or after the launcher's SIGTERM, with this code.
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
    /// A state this crate does not know (a newer library).
    Unknown(i32),
}

/// The outcome of one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RankReport {
    /// The rank's global rank.
    pub rank: usize,
    /// How it ended.
    pub state: RankState,
    /// Its process id, if it was started.
    pub pid: Option<u32>,
    /// The launcher stopped it (after another rank's failure, a timeout or an
    /// interrupt) rather than the rank ending by itself.
    pub stopped_by_launcher: bool,
    /// The error text it reported ([`set_error`](crate::set_error), an
    /// uncaught C++ exception ...); empty if none.
    pub error: String,
}

impl RankReport {
    /// The exit code, if it exited.
    pub fn exit_code(&self) -> Option<i32> {
        match self.state {
            RankState::Exited(code) => Some(code),
            _ => None,
        }
    }

    /// The signal that ended it, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.state {
            RankState::Signaled(signal) => Some(signal),
            _ => None,
        }
    }

    /// It exited with code 0.
    pub fn success(&self) -> bool {
        self.state == RankState::Exited(0)
    }
}

/// How a job ended: one [`RankReport`] per rank, the rank whose failure ended
/// it, and the bytes rank 0 handed back with [`set_result`](crate::set_result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub(super) ranks: Vec<RankReport>,
    pub(super) failed_rank: Option<usize>,
    pub(super) result: Option<Vec<u8>>,
    pub(super) restarts: usize,
}

impl Report {
    /// Every rank's outcome, indexed by rank.
    pub fn ranks(&self) -> &[RankReport] {
        &self.ranks
    }

    /// One rank's outcome.
    pub fn rank(&self, rank: usize) -> Option<&RankReport> {
        self.ranks.get(rank)
    }

    /// The number of ranks.
    pub fn nprocs(&self) -> usize {
        self.ranks.len()
    }

    /// The rank whose failure ended the job; `None` on success, timeout or
    /// interrupt.
    pub fn failed_rank(&self) -> Option<usize> {
        self.failed_rank
    }

    /// The bytes rank 0 set with [`set_result`](crate::set_result), or
    /// `None` if it set none. (Borrowed; see [`Report::into_result`] for an
    /// owned `Vec`.)
    pub fn result(&self) -> Option<&[u8]> {
        self.result.as_deref()
    }

    /// Takes rank 0's bytes out of the report.
    pub fn into_result(self) -> Option<Vec<u8>> {
        self.result
    }

    /// How many times the ranks were started again
    /// ([`Launcher::max_restarts`](crate::Launcher::max_restarts)); 0 for a
    /// [`Trainer`](crate::Trainer) run, whose result says its own.
    pub fn restarts(&self) -> usize {
        self.restarts
    }

    /// The first rank that ended badly by itself; 0 if none did. Used only
    /// when the library reports a worker failure without a failed rank.
    pub(crate) fn first_failure(&self) -> usize {
        self.ranks
            .iter()
            .find(|r| !r.success() && !r.stopped_by_launcher)
            .map_or(0, |r| r.rank)
    }
}
