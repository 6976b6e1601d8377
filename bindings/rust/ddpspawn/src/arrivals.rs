// Which rank holds the others back: a context's arrivals at its collectives,
// as `Context::straggler_report` returns them.

/// One rank's arrivals so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankArrivals {
    /// Collectives it reached after every other rank.
    pub arrived_last: i64,
    /// Summed over those: how much later than the next-latest rank it came.
    pub late_seconds: f64,
    /// Summed over every collective: how long it waited for the last rank.
    pub waited_seconds: f64,
}

/// How a context's ranks have arrived at its collectives so far.
///
/// Arrivals are timed where one launcher's ranks meet in shared memory on
/// one host (gloo); with nccl, gloo over TCP or several nodes `measured` is
/// false and `summary` says why.
#[derive(Debug, Clone, PartialEq)]
pub struct StragglerReport {
    /// Whether arrivals are timed.
    pub measured: bool,
    /// The collectives timed.
    pub collectives: i64,
    /// The rank that arrived last most often; `None` when none did.
    pub straggler: Option<usize>,
    /// For example "rank 1 arrived last at 87% of 4,140 collectives, 2.1 ms
    /// late on average", or why nothing was measured.
    pub summary: String,
    /// Each rank's arrivals, in rank order.
    pub ranks: Vec<RankArrivals>,
}
