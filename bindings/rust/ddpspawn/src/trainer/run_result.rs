// What a training run hands back: the `RunResult` of rank 0's `key=value`
// pairs, and its accessors.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};

/// What a run hands back: rank 0's `key=value` pairs, copied out of the
/// library.
///
/// fit: `checkpoint`, `metrics_csv`, `epoch`, `global_step`,
/// `metric.<name>`, `straggler` and `straggler.*`, and `stopped_by`,
/// `best_model_path`, `best_model_score` when they apply; validate and test: `metric.<name>`; predict:
/// `predictions` (a CSV path) and `count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    pub(super) text: String,
    pub(super) pairs: Vec<(String, String)>,
}

impl RunResult {
    /// The value for `key`, e.g. `"global_step"` or `"metric.val_loss"`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every pair, in the library's order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The pairs as the library gave them: `key=value` lines.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Metric `name` (the pair `metric.<name>`), e.g. `"val_accuracy"`.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.get(&format!("metric.{name}"))?.parse().ok()
    }

    /// Every metric by name.
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        self.pairs
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("metric.")?.to_string(), v.parse().ok()?)))
            .collect()
    }

    /// fit: the final checkpoint (weights, optimizer state, position, random
    /// generators); give it to [`Trainer::resume_from`](crate::Trainer::resume_from)
    /// to continue, or to [`Trainer::checkpoint`](crate::Trainer::checkpoint) to
    /// validate, test or predict with its weights.
    pub fn checkpoint(&self) -> Option<&Path> {
        self.get("checkpoint").map(Path::new)
    }

    /// fit: the metrics log (`epoch,step,name,value`).
    pub fn metrics_csv(&self) -> Option<&Path> {
        self.get("metrics_csv").map(Path::new)
    }

    /// fit: epochs completed.
    pub fn epoch(&self) -> Option<u64> {
        self.get("epoch")?.parse().ok()
    }

    /// fit: optimizer steps taken.
    pub fn global_step(&self) -> Option<u64> {
        self.get("global_step")?.parse().ok()
    }

    /// fit: what ended it before `max_epochs`/`max_steps`, if anything:
    /// `"early_stopping"`, `"max_time"` or a signal's name (`"SIGUSR1"`).
    pub fn stopped_by(&self) -> Option<&str> {
        self.get("stopped_by")
    }

    /// fit with a checkpoint monitor (option `monitor`) or a checkpoint
    /// filename: the best checkpoint kept (the latest, without a monitor).
    pub fn best_model_path(&self) -> Option<&Path> {
        self.get("best_model_path").map(Path::new)
    }

    /// fit with option `monitor`: the monitored metric's value in
    /// [`best_model_path`](RunResult::best_model_path).
    pub fn best_model_score(&self) -> Option<f64> {
        self.get("best_model_score")?.parse().ok()
    }

    /// fit: which rank arrived last at the collectives, e.g. "rank 1 arrived
    /// last at 87% of 4,140 collectives, 2.1 ms late on average", or why it
    /// was not measured. The per-rank figures are the pairs
    /// `straggler.rank<r>.arrived_last`, `.late_ms` and `.waited_ms`.
    pub fn straggler(&self) -> Option<&str> {
        self.get("straggler")
    }

    /// fit: the rank that arrived last most often; `None` when none did or
    /// arrivals were not measured.
    pub fn straggler_rank(&self) -> Option<usize> {
        self.get("straggler.rank")?.parse().ok()
    }

    /// predict: the CSV of predictions, one row per sample in dataset order.
    pub fn predictions_path(&self) -> Option<&Path> {
        self.get("predictions").map(Path::new)
    }

    /// predict: the number of predictions.
    pub fn count(&self) -> Option<usize> {
        self.get("count")?.parse().ok()
    }

    /// predict: reads [`predictions_path`](RunResult::predictions_path), one
    /// row per sample in dataset order (the file holds 6 significant
    /// digits). [`Error::FailedPrecondition`] for a result that is not a
    /// predict's; [`Error::Internal`] when the file cannot be read or parsed.
    pub fn read_predictions(&self) -> Result<Vec<Vec<f64>>> {
        let path = self
            .predictions_path()
            .ok_or_else(|| Error::FailedPrecondition {
                message: "the result has no predictions (not a predict run)".to_string(),
            })?;
        let text = std::fs::read_to_string(path).map_err(|e| Error::Internal {
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        text.lines()
            .filter(|line| !line.trim().is_empty())
            .enumerate()
            .map(|(row, line)| {
                line.split(',')
                    .map(|field| {
                        field.trim().parse::<f64>().map_err(|_| Error::Internal {
                            message: format!(
                                "{} row {}: {field:?} is not a number",
                                path.display(),
                                row + 1
                            ),
                        })
                    })
                    .collect()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn reads_pairs() {
        let pairs: Vec<(String, String)> = [
            ("checkpoint", "/tmp/x/last.ckpt"),
            ("epoch", "3"),
            ("global_step", "21"),
            ("metric.val_loss", "0.5"),
            ("metric.val_accuracy", "0.75"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let result = RunResult {
            text: String::new(),
            pairs,
        };
        assert_eq!(result.checkpoint(), Some(Path::new("/tmp/x/last.ckpt")));
        assert_eq!((result.epoch(), result.global_step()), (Some(3), Some(21)));
        assert_eq!(result.metric("val_loss"), Some(0.5));
        assert_eq!(result.metric("missing"), None);
        assert_eq!(result.metrics().len(), 2);
        assert_eq!(result.pairs().len(), 5);
        assert_eq!(result.get("metric.val_accuracy"), Some("0.75"));
        assert_eq!(
            result.read_predictions().unwrap_err().kind(),
            ErrorKind::FailedPrecondition
        );
    }
}
